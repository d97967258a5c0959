/* serve_seq.c: the sequences of pengine serve: one pump thread takes every token event of
 * the engine and queues it on its request (ev.user names the request's choice), where the
 * request's connection thread waits for it. A request runs a sequence per choice (its
 * prompts times "n"), and its one queue holds the events of all of them in the order they
 * came. The pump also times the tokens for the metrics, so that a client that reads slowly
 * does not stretch the time per output token.
 *
 * Every submitted sequence gets exactly one final event from the engine; a request is freed
 * only after it has taken the final events of all its sequences, so the pump never touches
 * a freed request.
 *
 * A watched request's connection thread waits for its events in poll() on an eventfd the
 * pump writes after queuing one (the queue itself stays under the request's mutex), 100 ms
 * at a time, and between two looks at its client: a client that has gone (it closed or
 * reset the connection) cancels the sequence at once, whether it waits in the queue, is in
 * prefill or waits for a whole answer, not only at the next write of a stream. (A timed
 * condition wait would do the same, but valgrind's helgrind misreads glibc's timed wait.) */
#include "serve.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "llm_run.h"

/* One choice of a request: its sequence. */
typedef struct serve_choice {
    serve_seq *q;
    int index;
    uint64_t id;               /* the engine's, once submitted (under q->mu) */
    int submitted;
    int ended;                 /* the pump queued its final event (under q->mu) */
    int cancelled;
    int lost;                  /* a token found no room (out of memory): the pump's */
    /* the pump's, for the metrics */
    double t_submit, t_last;   /* ms */
    int ntok;
} serve_choice;

struct serve_seq {
    serve_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_ev *q;               /* (cap) ring of events not yet taken */
    size_t head, n, cap;
    serve_choice *ch;          /* (nch) */
    int nch;
    int nended;                /* final events queued by the pump */
    int ntaken;                /* ... and taken */
    serve_ev last;             /* the last final event taken */
    int nreleased;             /* final events the pump is done with (under its mutex) */
    int client_fd;             /* the request's connection (-1: not watched) */
    int wake_fd;               /* watched: an eventfd the pump writes after each event */
    double t_checked;          /* watched: when the client was last looked at (ms) */
    pe_grammar *grammar;       /* the job's own grammar (a schema's, a regex's, ...): freed
                                * with the request, once its sequences have ended */
};

/* ---- the pump ---------------------------------------------------------------------------- */

/* The pump's part of the metrics for one event of choice c. */
static void time_event(serve_server *s, serve_choice *c, const pe_token_event *ev)
{
    double now = cli_now_ms();
    serve_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    if (ev->token >= 0) {
        m->c.generated_tokens++;
        if (c->ntok == 0) {
            m->c.waiting--;
            serve_hist_add(&m->c.ttft, (now - c->t_submit) / 1e3);
        } else {
            serve_hist_add(&m->c.tpot, (now - c->t_last) / 1e3);
        }
    } else if (c->ntok == 0) {
        m->c.waiting--; /* ended without a token */
    }
    if (ev->finish != PE_FINISH_NONE)
        m->c.running--;
    pthread_mutex_unlock(&m->mu);
    if (ev->token >= 0) {
        c->ntok++;
        c->t_last = now;
    }
}

/* Room in q's ring for one more event, growing it; the ring always keeps a place for the
 * final event of every choice not ended (serve_seq_start reserves them), so only a token
 * can find none. q->mu held. */
static int room_for(serve_seq *q, int final)
{
    const size_t due = (size_t)(q->nch - q->nended) - (final ? 1 : 0); /* others' finals */
    if (q->n + 1 + due <= q->cap)
        return 1;
    size_t cap = 2 * q->cap;
    serve_ev *r = malloc(cap * sizeof *r);
    if (!r)
        return final; /* (a final event's place is reserved) */
    for (size_t k = 0; k < q->n; k++) /* unroll the ring into the new one */
        r[k] = q->q[(q->head + k) % q->cap];
    free(q->q);
    q->q = r;
    q->head = 0;
    q->cap = cap;
    return 1;
}

/* Queues ev on its request. Out of memory, a token is lost; its choice's final event then
 * comes as an error, so that no client takes a text with a hole for a whole one. */
static void deliver(serve_server *s, const pe_token_event *ev)
{
    serve_choice *c = ev->user;
    serve_seq *q = c->q;
    time_event(s, c, ev);
    const int final = ev->finish != PE_FINISH_NONE;
    serve_ev e = {.choice = c->index, .token = ev->token, .finish = ev->finish,
                  .status = ev->status,
                  .lp = {.logprob = ev->logprob, .ntop = ev->nlogprobs}};
    const size_t ntop = (size_t)ev->nlogprobs;
    memcpy(e.lp.top, ev->top_tokens, ntop * sizeof *e.lp.top);
    memcpy(e.lp.top_logprob, ev->top_logprobs, ntop * sizeof *e.lp.top_logprob);
    pthread_mutex_lock(&q->mu);
    if (!room_for(q, final)) {
        c->lost = 1;
    } else {
        if (final && c->lost)
            e = (serve_ev){.choice = c->index, .token = -1, .finish = PE_FINISH_ERROR,
                           .status = PE_ENOMEM};
        q->q[(q->head + q->n++) % q->cap] = e;
    }
    if (final) {
        c->ended = 1;
        q->nended++;
    }
    pthread_cond_signal(&q->cv);
    if (q->wake_fd >= 0) {
        uint64_t one = 1; /* a full counter (never, at 2^64 - 2) is a wake-up already */
        ssize_t w = write(q->wake_fd, &one, sizeof one);
        (void)w;
    }
    pthread_mutex_unlock(&q->mu);
}

/* Sleeps while no sequence is outstanding; returns 0 when asked to stop. */
static int pump_wait_work(serve_pump *p)
{
    pthread_mutex_lock(&p->mu);
    while (p->outstanding == 0 && !p->stop)
        pthread_cond_wait(&p->cv, &p->mu);
    int go = p->outstanding > 0;
    pthread_mutex_unlock(&p->mu);
    return go;
}

static void *pump_main(void *arg)
{
    serve_server *s = arg;
    serve_pump *p = &s->pump;
    while (pump_wait_work(p)) {
        pe_token_event ev;
        pe_status st = pe_seq_wait(s->e, &ev);
        if (st == PE_EAGAIN) {
            /* counted but not yet in the engine (the submit is under way): a nap */
            struct timespec nap = {0, 500 * 1000};
            nanosleep(&nap, NULL);
            continue;
        }
        if (st != PE_OK)
            break; /* the engine is closed: nothing more comes */
        int final = ev.finish != PE_FINISH_NONE;
        deliver(s, &ev);
        if (final) { /* the request is freed once all are released (serve_seq_close) */
            serve_seq *q = ((serve_choice *)ev.user)->q;
            pthread_mutex_lock(&p->mu);
            q->nreleased++;
            p->outstanding--;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int serve_pump_start(serve_server *s)
{
    serve_pump *p = &s->pump;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (pthread_create(&p->thread, NULL, pump_main, s) != 0) {
        cli_error("cannot start the event thread; free some resources and retry");
        return CLI_RUNTIME;
    }
    p->started = 1;
    return CLI_OK;
}

void serve_pump_stop(serve_server *s)
{
    serve_pump *p = &s->pump;
    if (!p->started)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->outstanding > 0)
        pthread_cond_wait(&p->cv, &p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    p->started = 0;
}

/* ---- a request's sequence ----------------------------------------------------------------- */

static void seq_free(serve_seq *q)
{
    if (q->wake_fd >= 0)
        close(q->wake_fd);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q->q);
    free(q->ch);
    pe_grammar_free(q->grammar);
    free(q);
}

static void pump_count(serve_pump *p, int delta)
{
    pthread_mutex_lock(&p->mu);
    p->outstanding += delta;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Why the engine refused a sequence, as an HTTP status. */
static unsigned refused_status(pe_status st)
{
    switch (st) {
    case PE_EINVAL: return 400;
    case PE_EAGAIN:
    case PE_ECLOSED: return 503;
    default: return 500;
    }
}

/* Choice c's sequence: its prompt (c / n), and the job's seed + c % n. Counted in the
 * metrics and by the pump only once it is in the engine. Returns the engine's status. */
static pe_status submit_choice(serve_server *s, const serve_job *j, serve_choice *c,
                               const pe_grammar *grammar)
{
    const serve_prompt *pr = &j->prompts[c->index / j->n];
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = pr->ids;
    p.prompt_len = pr->len;
    p.max_tokens = j->max_tokens;
    p.min_tokens = j->min_tokens;
    p.sampling = j->sampling;
    p.sampling.seed = j->sampling.seed + (uint64_t)(c->index % j->n);
    p.logit_bias = j->nbias ? j->bias : NULL;
    p.nlogit_bias = j->nbias;
    p.stop = j->nstop_ids ? j->stop_ids : NULL;
    p.nstop = j->nstop_ids;
    p.ignore_eos = j->ignore_eos;
    p.grammar = grammar ? grammar : j->json_object ? s->json_grammar : NULL;
    /* the engine gives the token's own log-probability with its top list: at least 1 */
    p.logprobs = j->logprobs < 0 ? 0 : j->logprobs > 0 ? j->logprobs : 1;
    p.user = c;
    c->t_submit = cli_now_ms();
    /* counted first: the pump must be awake for the events of the submit */
    pump_count(&s->pump, 1);
    serve_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    m->c.running++;
    m->c.waiting++;
    m->c.prompt_tokens += (long)pr->len;
    pthread_mutex_unlock(&m->mu);
    uint64_t id = 0;
    pe_status st = pe_seq_submit(s->e, &p, &id);
    if (st != PE_OK) {
        pthread_mutex_lock(&m->mu);
        m->c.running--;
        m->c.waiting--;
        m->c.prompt_tokens -= (long)pr->len;
        pthread_mutex_unlock(&m->mu);
        pump_count(&s->pump, -1);
        return st;
    }
    pthread_mutex_lock(&c->q->mu);
    c->id = id;
    c->submitted = 1;
    pthread_mutex_unlock(&c->q->mu);
    return PE_OK;
}

unsigned serve_seq_start(serve_server *s, serve_job *j, serve_seq **out, char *msg,
                         size_t msg_len)
{
    *out = NULL;
    const int nch = j->nprompts * j->n;
    serve_seq *q = calloc(1, sizeof *q);
    if (q) { /* the ring starts with a place for every final event (room_for) */
        q->ch = calloc((size_t)nch, sizeof *q->ch);
        q->cap = (size_t)nch + 64;
        q->q = malloc(q->cap * sizeof *q->q);
    }
    if (!q || !q->ch || !q->q) {
        if (q)
            free(q->ch), free(q->q);
        free(q);
        snprintf(msg, msg_len, "out of memory for a request");
        return 500;
    }
    q->srv = s;
    q->nch = nch;
    q->grammar = j->grammar; /* the request owns it from here */
    j->grammar = NULL;
    q->client_fd = q->wake_fd = -1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    for (int c = 0; c < nch; c++)
        q->ch[c] = (serve_choice){.q = q, .index = c};
    for (int c = 0; c < nch; c++) {
        pe_status st = submit_choice(s, j, &q->ch[c], q->grammar);
        if (st != PE_OK) { /* the choices already in end now: the request is refused */
            snprintf(msg, msg_len, "%s", pe_last_error());
            pthread_mutex_lock(&q->mu);
            q->nch = c;
            pthread_mutex_unlock(&q->mu);
            serve_seq_close(q);
            return refused_status(st);
        }
    }
    *out = q;
    return 0;
}

void serve_seq_watch(serve_seq *q, int fd)
{
    int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0)
        return; /* out of descriptors: not watched, the next write still notices */
    pthread_mutex_lock(&q->mu);
    q->client_fd = fd;
    q->wake_fd = wake;
    pthread_mutex_unlock(&q->mu);
}

/* 1 when the client at fd has closed or reset its connection (a byte it sent and we have
 * not read yet, say a pipelined request, is not a close). Only the connection's own thread
 * reads that socket, and it is here. */
static int client_gone(int fd)
{
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A watched request's look at its client, at most every 100 ms (events may come faster
 * than that for as long as it generates): a client gone cancels the sequence. Only the
 * connection's thread calls it (client_fd and t_checked are its own once watched). */
static void look_at_client(serve_seq *q)
{
    const double now = cli_now_ms();
    if (q->client_fd < 0 || now - q->t_checked < 100.0)
        return;
    q->t_checked = now;
    if (client_gone(q->client_fd))
        serve_seq_cancel(q); /* nobody wants the rest */
}

void serve_seq_next(serve_seq *q, serve_ev *ev)
{
    look_at_client(q);
    pthread_mutex_lock(&q->mu);
    if (q->ntaken == q->nch) {
        *ev = q->last;
        pthread_mutex_unlock(&q->mu);
        return;
    }
    while (q->n == 0) {
        if (q->wake_fd < 0) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        pthread_mutex_unlock(&q->mu);
        struct pollfd w = {q->wake_fd, POLLIN, 0};
        if (poll(&w, 1, 100) > 0) {
            uint64_t n;
            ssize_t r = read(q->wake_fd, &n, sizeof n); /* the pump's wake-ups, taken */
            (void)r;
        }
        look_at_client(q);
        pthread_mutex_lock(&q->mu);
    }
    *ev = q->q[q->head];
    q->head = (q->head + 1) % q->cap;
    q->n--;
    if (ev->finish != PE_FINISH_NONE) {
        q->ntaken++;
        q->last = *ev;
    }
    pthread_mutex_unlock(&q->mu);
}

void serve_seq_cancel_choice(serve_seq *q, int choice)
{
    pthread_mutex_lock(&q->mu);
    serve_choice *c = &q->ch[choice];
    int go = c->submitted && !c->ended && !c->cancelled;
    c->cancelled = 1;
    uint64_t id = c->id;
    pthread_mutex_unlock(&q->mu);
    if (go)
        pe_seq_cancel(q->srv->e, id);
}

void serve_seq_cancel(serve_seq *q)
{
    for (int c = 0; c < q->nch; c++)
        serve_seq_cancel_choice(q, c);
}

/* Whether every choice's final event has been taken. */
static int all_taken(serve_seq *q)
{
    pthread_mutex_lock(&q->mu);
    int done = q->ntaken == q->nch;
    pthread_mutex_unlock(&q->mu);
    return done;
}

void serve_seq_close(serve_seq *q)
{
    if (!q)
        return;
    serve_seq_cancel(q);
    serve_ev ev;
    while (!all_taken(q)) /* the pump writes into q until the final events: wait for them */
        serve_seq_next(q, &ev);
    /* The pump's unlock of q->mu after a final event is its last use of q's mutex for that
     * sequence, and it says so under its own mutex: waiting for all of them puts the
     * unlocks' stores before pthread_mutex_destroy in every checker's order (helgrind
     * reported the destroy's read of the mutex as racing with that store, in
     * test_serve_helgrind, once). */
    serve_pump *p = &q->srv->pump;
    pthread_mutex_lock(&p->mu);
    while (q->nreleased < q->nch)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    seq_free(q);
}
