/* serve_page.c: the chat page of pengine serve (GET /): apps/serve_page.html, whose bytes the
 * build writes into serve_page.html.inc (cmake/embed_file.cmake), so that the command needs
 * no file beside it. */
#include "serve.h"

static const unsigned char page[] = {
#include "serve_page.html.inc"
};

const char *serve_page_html(size_t *len)
{
    *len = sizeof page;
    return (const char *)page;
}
