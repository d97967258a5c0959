/* chat.h: "pengine chat": an interactive conversation with a decoder, kept in its KV cache
 * between turns. */
#ifndef PE_APPS_CHAT_H
#define PE_APPS_CHAT_H

/* argv[0] is "chat". Reads the user's turns from stdin, one per line, and streams each reply
 * on stdout. Returns the exit code. */
int cli_chat(int argc, char **argv);

#endif
