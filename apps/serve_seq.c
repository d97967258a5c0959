/* serve_seq.c: the sequences of pengine serve: one pump thread takes every token event of
 * the engine and queues it on its request (ev.user), where the request's connection thread
 * waits for it. The pump also times the tokens for the metrics, so that a client that reads
 * slowly does not stretch the time per output token.
 *
 * Every submitted sequence gets exactly one final event from the engine; a request is freed
 * only after it has taken that event, so the pump never touches a freed request.
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

struct serve_seq {
    serve_server *srv;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    serve_ev *q;               /* (cap) ring of events not yet taken */
    size_t head, n, cap;
    int ended;                 /* the pump queued the final event */
    serve_ev last;             /* the final event, once taken */
    int taken_final;
    int released;              /* the pump is done with it (under the pump's mutex) */
    uint64_t id;
    int submitted;
    int cancelled;
    int client_fd;             /* the request's connection (-1: not watched) */
    int wake_fd;               /* watched: an eventfd the pump writes after each event */
    double t_checked;          /* watched: when the client was last looked at (ms) */
    /* the pump's, for the metrics */
    double t_submit, t_last;   /* ms */
    int ntok;
};

/* ---- the pump ---------------------------------------------------------------------------- */

/* The pump's part of the metrics for one event of q. */
static void time_event(serve_server *s, serve_seq *q, const pe_token_event *ev)
{
    double now = cli_now_ms();
    serve_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    if (ev->token >= 0) {
        m->c.generated_tokens++;
        if (q->ntok == 0) {
            m->c.waiting--;
            serve_hist_add(&m->c.ttft, (now - q->t_submit) / 1e3);
        } else {
            serve_hist_add(&m->c.tpot, (now - q->t_last) / 1e3);
        }
    } else if (q->ntok == 0) {
        m->c.waiting--; /* ended without a token */
    }
    if (ev->finish != PE_FINISH_NONE)
        m->c.running--;
    pthread_mutex_unlock(&m->mu);
    if (ev->token >= 0) {
        q->ntok++;
        q->t_last = now;
    }
}

/* Queues ev on its request. Out of memory, a token is lost; a final event then replaces the
 * newest token as an error, so that no client is left waiting. */
static void deliver(serve_server *s, const pe_token_event *ev)
{
    serve_seq *q = ev->user;
    time_event(s, q, ev);
    pthread_mutex_lock(&q->mu);
    if (q->n == q->cap) {
        size_t cap = q->cap ? 2 * q->cap : 64;
        serve_ev *r = malloc(cap * sizeof *r);
        if (r) { /* unroll the ring into the new one */
            for (size_t k = 0; k < q->n; k++)
                r[k] = q->q[(q->head + k) % q->cap];
            free(q->q);
            q->q = r;
            q->head = 0;
            q->cap = cap;
        }
    }
    serve_ev e = {.token = ev->token, .finish = ev->finish, .status = ev->status,
                  .lp = {.logprob = ev->logprob, .ntop = ev->nlogprobs}};
    const size_t ntop = (size_t)ev->nlogprobs;
    memcpy(e.lp.top, ev->top_tokens, ntop * sizeof *e.lp.top);
    memcpy(e.lp.top_logprob, ev->top_logprobs, ntop * sizeof *e.lp.top_logprob);
    if (q->n < q->cap) {
        q->q[(q->head + q->n++) % q->cap] = e;
    } else if (ev->finish != PE_FINISH_NONE && q->n > 0) {
        /* no room for the final event: it replaces the newest token, as an error */
        q->q[(q->head + q->n - 1) % q->cap] = (serve_ev){
            .token = -1, .finish = PE_FINISH_ERROR, .status = PE_ENOMEM};
    }
    if (ev->finish != PE_FINISH_NONE)
        q->ended = 1;
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
        if (final) { /* the request is freed once released (serve_seq_close) */
            serve_seq *q = ev.user;
            pthread_mutex_lock(&p->mu);
            q->released = 1;
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

unsigned serve_seq_start(serve_server *s, const serve_job *j, serve_seq **out, char *msg,
                         size_t msg_len)
{
    *out = NULL;
    serve_seq *q = calloc(1, sizeof *q);
    if (!q) {
        snprintf(msg, msg_len, "out of memory for a request");
        return 500;
    }
    q->srv = s;
    q->client_fd = q->wake_fd = -1;
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    pe_seq_params p;
    pe_seq_params_init(&p);
    p.prompt = j->prompt;
    p.prompt_len = j->prompt_len;
    p.max_tokens = j->max_tokens;
    p.sampling = j->sampling;
    p.logit_bias = j->nbias ? j->bias : NULL;
    p.nlogit_bias = j->nbias;
    p.stop = j->nstop_ids ? j->stop_ids : NULL;
    p.nstop = j->nstop_ids;
    p.ignore_eos = j->ignore_eos;
    /* the engine gives the token's own log-probability with its top list: at least 1 */
    p.logprobs = j->logprobs < 0 ? 0 : j->logprobs > 0 ? j->logprobs : 1;
    p.user = q;
    q->t_submit = cli_now_ms();
    /* counted first: the pump must be awake for the events of the submit */
    pump_count(&s->pump, 1);
    serve_metrics *m = &s->metrics;
    pthread_mutex_lock(&m->mu);
    m->c.running++;
    m->c.waiting++;
    m->c.prompt_tokens += (long)j->prompt_len;
    pthread_mutex_unlock(&m->mu);
    uint64_t id = 0;
    pe_status st = pe_seq_submit(s->e, &p, &id);
    if (st != PE_OK) {
        snprintf(msg, msg_len, "%s", pe_last_error());
        pthread_mutex_lock(&m->mu);
        m->c.running--;
        m->c.waiting--;
        m->c.prompt_tokens -= (long)j->prompt_len;
        pthread_mutex_unlock(&m->mu);
        pump_count(&s->pump, -1);
        seq_free(q);
        return refused_status(st);
    }
    pthread_mutex_lock(&q->mu);
    q->id = id;
    q->submitted = 1;
    pthread_mutex_unlock(&q->mu);
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
    if (q->taken_final) {
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
        q->taken_final = 1;
        q->last = *ev;
    }
    pthread_mutex_unlock(&q->mu);
}

void serve_seq_cancel(serve_seq *q)
{
    pthread_mutex_lock(&q->mu);
    int go = q->submitted && !q->ended && !q->cancelled;
    q->cancelled = 1;
    uint64_t id = q->id;
    pthread_mutex_unlock(&q->mu);
    if (go)
        pe_seq_cancel(q->srv->e, id);
}

void serve_seq_close(serve_seq *q)
{
    if (!q)
        return;
    serve_seq_cancel(q);
    serve_ev ev;
    do /* the pump writes into q until the final event: wait for it */
        serve_seq_next(q, &ev);
    while (ev.finish == PE_FINISH_NONE);
    /* The pump's unlock of q->mu after the final event is its last use of q's mutex, and
     * it says so under its own mutex: waiting for that puts the unlock's store before
     * pthread_mutex_destroy in every checker's order (helgrind reported the destroy's read
     * of the mutex as racing with that store, in test_serve_helgrind, once). */
    serve_pump *p = &q->srv->pump;
    pthread_mutex_lock(&p->mu);
    while (!q->released)
        pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
    seq_free(q);
}
