/* serve_http.c: the HTTP side of pengine serve, on libmicrohttpd (no parser of our own): a
 * thread per connection, so that a request may block on its sequence; the body gathered up
 * to --max-body; the route, the API key and the draining checked; every request answered
 * exactly once, errors as OpenAI's JSON. GET / is the chat page (serve_page.c). */
#include "serve.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

/* A request's state between libmicrohttpd's calls: its body so far. */
typedef struct serve_conn {
    char *body;
    size_t len, cap;
    int too_big;               /* the body passed --max-body: 413 at its end */
    int answered;              /* a response is queued */
} serve_conn;

enum route { R_PAGE, R_HEALTH, R_METRICS, R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE,
             R_DETOKENIZE };

static const struct {
    const char *path, *method;
    enum route r;
    int keyed;                 /* needs the API key */
} routes[] = {
    {"/", "GET", R_PAGE, 0},
    {"/health", "GET", R_HEALTH, 0},
    {"/metrics", "GET", R_METRICS, 0},
    {"/v1/models", "GET", R_MODELS, 1},
    {"/v1/completions", "POST", R_COMPLETIONS, 1},
    {"/v1/chat/completions", "POST", R_CHAT, 1},
    {"/tokenize", "POST", R_TOKENIZE, 1},
    {"/detokenize", "POST", R_DETOKENIZE, 1},
};
enum { NROUTES = sizeof routes / sizeof routes[0] };

char *serve_error_json(unsigned status, const char *message)
{
    const char *code = status == 401   ? "invalid_api_key"
                       : status == 404 ? "not_found"
                       : status == 405 ? "method_not_allowed"
                       : status == 413 ? "request_too_large"
                       : status == 503 ? "service_unavailable"
                       : status >= 500 ? "internal_error"
                                       : "invalid_request";
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", status >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddStringToObject(e, "code", code);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

/* Queues r (taken) with status, its type and one more header if hname. */
static enum MHD_Result queue(serve_server *s, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r, const char *type, const char *hname,
                             const char *hvalue)
{
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    if (atomic_load(&s->draining)) /* keep-alive clients: go, the server is stopping */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    serve_metrics_status(&s->metrics, status);
    return ok;
}

/* Queues body (malloc'ed, taken) with status; a NULL body (out of memory) closes the
 * connection instead. */
static enum MHD_Result respond(serve_server *s, struct MHD_Connection *c, unsigned status,
                               const char *type, char *body, const char *hname,
                               const char *hvalue)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    return queue(s, c, status, r, type, hname, hvalue);
}

static enum MHD_Result fail(serve_server *s, struct MHD_Connection *c, unsigned status,
                            const char *msg)
{
    const char *hname = status == 401 ? MHD_HTTP_HEADER_WWW_AUTHENTICATE : NULL;
    return respond(s, c, status, "application/json", serve_error_json(status, msg), hname,
                   "Bearer");
}

/* ---- the routes ---------------------------------------------------------------------------- */

/* The chat page, from the command's own bytes; its policy lets it load nothing from
 * elsewhere (it has no need to). */
static enum MHD_Result page(serve_server *s, struct MHD_Connection *c)
{
    size_t len;
    const char *html = serve_page_html(&len);
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)html, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    return queue(s, c, 200, r, "text/html; charset=utf-8", "Content-Security-Policy",
                 "default-src 'none'; connect-src 'self'; script-src 'unsafe-inline'; "
                 "style-src 'unsafe-inline'; img-src data:");
}

static enum MHD_Result models(serve_server *s, struct MHD_Connection *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "pengine");
    cJSON_AddNumberToObject(m, "max_model_len", s->m.context);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), m);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return respond(s, c, 200, "application/json", text, NULL, NULL);
}

/* A streamed answer: libmicrohttpd calls serve_reply_read for its bytes (chunked), and
 * serve_reply_stream_free when it ends or the client goes (which cancels the sequence). */
static enum MHD_Result stream(serve_server *s, struct MHD_Connection *c, const serve_job *j,
                              serve_seq *q)
{
    serve_stream *st = serve_reply_stream_new(s, j, q);
    if (!st)
        return fail(s, c, 500, "out of memory for the stream");
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 4096, serve_reply_read, st, serve_reply_stream_free);
    if (!r) {
        serve_reply_stream_free(st);
        return fail(s, c, 500, "out of memory for the stream");
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r); /* frees st through the callback if it was not queued */
    serve_metrics_status(&s->metrics, 200);
    return ok;
}

static enum MHD_Result completion(serve_server *s, struct MHD_Connection *c,
                                  const serve_conn *k, int chat)
{
    serve_job j;
    char msg[CLI_MSG_LEN];
    unsigned st = serve_parse(s, chat, k->body ? k->body : "", k->len, &j, msg, sizeof msg);
    if (st)
        return fail(s, c, st, msg);
    serve_seq *q = NULL;
    st = serve_echo_prepare(s, &j, msg, sizeof msg); /* before any sequence starts */
    if (!st)
        st = serve_seq_start(s, &j, &q, msg, sizeof msg);
    enum MHD_Result ok;
    if (!st) { /* a client that leaves before its answer cancels its sequence */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci)
            serve_seq_watch(q, ci->connect_fd);
    }
    if (st) {
        ok = fail(s, c, st, msg);
    } else if (j.stream) {
        ok = stream(s, c, &j, q);
    } else {
        char *body = serve_reply_whole(s, &j, q, &st);
        ok = respond(s, c, st, "application/json", body, NULL, NULL);
    }
    serve_job_free(&j);
    return ok;
}

/* "Authorization: Bearer KEY", compared in time independent of where it differs. */
static int authorized(const serve_server *s, struct MHD_Connection *c)
{
    const char *key = s->o->api_key;
    if (!key)
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    size_t n = strlen(key), m = strlen(h);
    unsigned char diff = n != m;
    for (size_t i = 0; i < n; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? h[i] : 0);
    return diff == 0;
}

static enum MHD_Result route(serve_server *s, struct MHD_Connection *c, const char *url,
                             const char *method, const serve_conn *k)
{
    int found = -1;
    for (int i = 0; i < NROUTES; i++)
        if (!strcmp(url, routes[i].path))
            found = i;
    if (found < 0)
        return fail(s, c, 404, "no such path; the server has /v1/completions, "
                    "/v1/chat/completions, /v1/models, /tokenize, /detokenize, /health, "
                    "/metrics and the chat page at /");
    if (routes[found].keyed && !authorized(s, c))
        return fail(s, c, 401, "a missing or wrong API key; send \"Authorization: Bearer KEY\" "
                    "with the server's --api-key");
    if (strcmp(method, routes[found].method)) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s takes %s only", url, routes[found].method);
        return respond(s, c, 405, "application/json", serve_error_json(405, msg),
                       MHD_HTTP_HEADER_ALLOW, routes[found].method);
    }
    if (atomic_load(&s->draining))
        return fail(s, c, 503, "the server is shutting down");
    switch (routes[found].r) {
    case R_PAGE: return page(s, c);
    case R_HEALTH:
        return respond(s, c, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL,
                       NULL);
    case R_METRICS: {
        pe_engine_info info;
        if (pe_engine_info_get(s->e, &info) != PE_OK)
            memset(&info, 0, sizeof info);
        return respond(s, c, 200, "text/plain; version=0.0.4",
                       serve_metrics_text(&s->metrics, &info), NULL, NULL);
    }
    case R_MODELS: return models(s, c);
    case R_COMPLETIONS: return completion(s, c, k, 0);
    case R_CHAT: return completion(s, c, k, 1);
    case R_TOKENIZE:
    case R_DETOKENIZE: {
        unsigned st;
        const char *b = k->body ? k->body : "";
        char *body = routes[found].r == R_TOKENIZE ? serve_tokenize(s, b, k->len, &st)
                                                   : serve_detokenize(s, b, k->len, &st);
        return respond(s, c, st, "application/json", body, NULL, NULL);
    }
    }
    return MHD_NO;
}

/* ---- libmicrohttpd's callbacks --------------------------------------------------------------- */

/* Keeps an uploaded piece of the body, or notes that the body is too big. */
static void gather(serve_server *s, serve_conn *k, const char *data, size_t n)
{
    if (k->too_big || k->len + n > s->o->max_body) {
        k->too_big = 1;
        return;
    }
    if (k->len + n + 1 > k->cap) {
        size_t cap = 2 * (k->len + n + 1);
        char *p = realloc(k->body, cap);
        if (!p) {
            k->too_big = 1;
            return;
        }
        k->body = p;
        k->cap = cap;
    }
    memcpy(k->body + k->len, data, n);
    k->len += n;
    k->body[k->len] = '\0';
}

/* The first call of a request: its state, and a body announced too big refused at once. */
static enum MHD_Result begin(serve_server *s, struct MHD_Connection *c, void **con_cls)
{
    serve_conn *k = calloc(1, sizeof *k);
    if (!k)
        return MHD_NO;
    *con_cls = k;
    serve_enter(s);
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.c.http_active++;
    pthread_mutex_unlock(&s->metrics.mu);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->o->max_body) {
        k->answered = 1;
        char msg[160];
        snprintf(msg, sizeof msg, "the body is %s bytes, over the server's limit of %zu "
                 "(--max-body)", cl, s->o->max_body);
        return fail(s, c, 413, msg);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    serve_server *s = cls;
    serve_conn *k = *con_cls;
    (void)version;
    if (!k)
        return begin(s, c, con_cls);
    if (*data_size) {
        if (!k->answered)
            gather(s, k, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (k->answered)
        return MHD_YES;
    k->answered = 1;
    if (k->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "the body is over the server's limit of %zu bytes "
                 "(--max-body)", s->o->max_body);
        return fail(s, c, 413, msg);
    }
    return route(s, c, url, method, k);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    serve_server *s = cls;
    serve_conn *k = *con_cls;
    (void)c;
    (void)toe;
    if (!k)
        return;
    free(k->body);
    free(k);
    *con_cls = NULL;
    pthread_mutex_lock(&s->metrics.mu);
    s->metrics.c.http_active--;
    pthread_mutex_unlock(&s->metrics.mu);
    serve_leave(s);
}

/* --host and --port as a socket address (a name is looked up). Returns 0 or -1. */
static int address(const serve_opts *o, struct sockaddr_storage *sa, int *ipv6)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    if (getaddrinfo(o->host, port, &hints, &res) != 0 || !res)
        return -1;
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *ipv6 = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    return 0;
}

int serve_http_start(serve_server *s, int *port)
{
    const serve_opts *o = s->o;
    struct sockaddr_storage sa;
    int ipv6 = 0;
    if (address(o, &sa, &ipv6)) {
        cli_errorf("--host %s is not an address of this machine; give one such as 127.0.0.1",
                   o->host);
        return CLI_USAGE;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | (ipv6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, s,
                                 MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        cli_errorf("cannot listen on %s port %d (is the port taken?); give another with "
                   "--port, or --port 0 for any free one", o->host, o->port);
        return CLI_RUNTIME;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : o->port;
    return CLI_OK;
}

void serve_http_quiesce(serve_server *s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void serve_http_stop(serve_server *s)
{
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
