/* vclock.h - the vector clock of executor watermarks (Slash §7.2.2).
 *
 * Entry r is the low watermark executor r last published: r promises never
 * again to contribute a record with event time below it. Each executor owns
 * its entry and pushes it with its epoch deltas; a leader may fire a window
 * ending at or before the minimum of all entries. Entries only grow
 * (a smaller update is ignored); INT64_MIN means "nothing promised yet",
 * INT64_MAX "finished".
 */
#ifndef SLASH_VCLOCK_H
#define SLASH_VCLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "slash/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct slash_vclock {
    uint32_t n;
    int64_t *wm;
} slash_vclock;

/* Allocates n entries, all INT64_MIN. */
slash_status slash_vclock_init(slash_vclock *vc, uint32_t n);
void slash_vclock_free(slash_vclock *vc);

/* Raises entry r to wm if larger; returns true when it changed. */
bool slash_vclock_update(slash_vclock *vc, uint32_t r, int64_t wm);

/* The minimum over all entries: the time up to which every executor is done. */
int64_t slash_vclock_min(const slash_vclock *vc);

/* The rank holding the minimum (the one everybody waits for). */
uint32_t slash_vclock_argmin(const slash_vclock *vc);

#ifdef __cplusplus
}
#endif
#endif
