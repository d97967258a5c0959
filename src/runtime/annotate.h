/* annotate.h: happens-before and ignore annotations for helgrind and DRD.
 *
 * helgrind and DRD do not understand C11 atomics. Lock-free code tells them two things:
 *   - the atomic words themselves (queue head/tail, slot sequence numbers, park counters)
 *     are not data: RT_IGNORE_WORD stops both tools from checking them;
 *   - handing a slot from one thread to another orders the memory around it:
 *     RT_HAPPENS_BEFORE(tag) in the thread that publishes, RT_HAPPENS_AFTER(tag) in the
 *     thread that observes the publication.
 * helgrind's ANNOTATE_BENIGN_RACE_SIZED does nothing useful here; VALGRIND_HG_DISABLE_CHECKING
 * does. DRD needs its own suppression request (DRD_START_SUPPRESSION). The happens-before
 * requests are shared: DRD answers helgrind's USERSO_SEND_PRE/RECV_POST codes, which are
 * the same numbers as its own ANNOTATE_HAPPENS_BEFORE/AFTER.
 *
 * Defined only when PE_ANNOTATE is set (CMake: valgrind headers present, not under TSan,
 * which understands C11 atomics natively); otherwise every macro is a no-op. Outside
 * valgrind a client request costs a few instructions.
 */
#ifndef PE_RUNTIME_ANNOTATE_H
#define PE_RUNTIME_ANNOTATE_H

#ifdef PE_ANNOTATE
#include <valgrind/helgrind.h>
#include <valgrind/drd.h>

#define RT_HAPPENS_BEFORE(tag) \
    VALGRIND_DO_CLIENT_REQUEST_STMT(_VG_USERREQ__HG_USERSO_SEND_PRE, (tag), 0, 0, 0, 0)
#define RT_HAPPENS_AFTER(tag) \
    VALGRIND_DO_CLIENT_REQUEST_STMT(_VG_USERREQ__HG_USERSO_RECV_POST, (tag), 0, 0, 0, 0)
/* helgrind frees what it keeps for tag (call before the memory goes away). */
#define RT_HAPPENS_FORGET(tag) \
    VALGRIND_DO_CLIENT_REQUEST_STMT(_VG_USERREQ__HG_USERSO_FORGET_ALL, (tag), 0, 0, 0, 0)

#define RT_IGNORE_RANGE(addr, len)                                                        \
    do {                                                                                   \
        VALGRIND_HG_DISABLE_CHECKING((addr), (len));                                       \
        VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ__DRD_START_SUPPRESSION, (addr), (len), \
                                        0, 0, 0);                                          \
    } while (0)
/* Back to normal checking (before the memory is freed and reused for plain data). */
#define RT_UNIGNORE_RANGE(addr, len)                                                       \
    do {                                                                                    \
        VALGRIND_HG_ENABLE_CHECKING((addr), (len));                                         \
        VALGRIND_DO_CLIENT_REQUEST_STMT(VG_USERREQ__DRD_FINISH_SUPPRESSION, (addr), (len), \
                                        0, 0, 0);                                           \
    } while (0)

#else

#define RT_HAPPENS_BEFORE(tag) ((void)(tag))
#define RT_HAPPENS_AFTER(tag) ((void)(tag))
#define RT_HAPPENS_FORGET(tag) ((void)(tag))
#define RT_IGNORE_RANGE(addr, len) ((void)(addr), (void)(len))
#define RT_UNIGNORE_RANGE(addr, len) ((void)(addr), (void)(len))

#endif

#define RT_IGNORE_WORD(w) RT_IGNORE_RANGE(&(w), sizeof(w))
#define RT_UNIGNORE_WORD(w) RT_UNIGNORE_RANGE(&(w), sizeof(w))

#endif
