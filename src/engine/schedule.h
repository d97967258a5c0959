/* schedule.h: how a request of rows travels through its replica's stages: the one
 * interface behind which the schedules differ.
 *
 *   naive, stream: dataflow. A request is cut into m micro-batches (naive: m = 1), one task
 *                  per micro-batch and TP lane; a task starts at stage 0 and moves on to the
 *                  next stage when its stage is done, so stages overlap micro-batches.
 *   gpipe:         clocked. Every worker of the replica gets the whole request; clock c
 *                  runs micro-batch c - p on stage p, and the replica's workers meet at a
 *                  barrier after each clock (m + pp - 1 clocks).
 *
 * A request completes when all of its parts are done: one part per (micro-batch, stage, TP
 * lane) under dataflow, one per worker under gpipe. en_task_end is where every part ends.
 */
#ifndef PE_ENGINE_SCHEDULE_H
#define PE_ENGINE_SCHEDULE_H

#include "common/error.h"
#include "pengine/pengine.h"

typedef struct pe_engine pe_engine;
typedef struct en_worker en_worker;
typedef struct en_task en_task;
typedef struct en_request en_request;

typedef struct en_schedule {
    const char *name;
    int clocked; /* the replica's workers meet at its clock barrier */
    /* The tasks of a request of m micro-batches, and the queue task i of replica d enters. */
    int (*ntasks)(const pe_engine *e, int m);
    int (*first_rank)(const pe_engine *e, int d, int i);
    /* The parts of its request task t stands for from stage p to the end of its way. */
    int (*parts_from)(const pe_engine *e, const en_task *t, int p);
    /* Runs task t on worker w (a dataflow task then moves on to the next stage). */
    pe_status (*run)(en_worker *w, en_task *t, pe_err *err);
} en_schedule;

/* The schedule of the engine's configuration. */
const en_schedule *en_schedule_get(pe_schedule s);
/* The pipeline stage task i of a request enters at. */
int en_task_first_stage(const pe_engine *e, int i);

/* Task t ended at stage p: its work done (s == PE_OK, one part), or dropped with the error s
 * (every part from p on). The only place a request's parts end. */
void en_task_end(pe_engine *e, en_task *t, int p, pe_status s);
/* A request none of whose tasks reached a queue: every task dropped at its first stage. */
void en_request_drop(pe_engine *e, en_request *r, pe_status s);

#endif
