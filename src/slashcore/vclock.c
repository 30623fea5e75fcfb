/* vclock.c - vector clock of watermarks; entries are monotonic (vclock.h). */
#include "slash/vclock.h"

#include <stdlib.h>

slash_status slash_vclock_init(slash_vclock *vc, uint32_t n)
{
    vc->n = n;
    vc->wm = malloc((n ? n : 1) * sizeof *vc->wm);
    if (!vc->wm)
        return slash_fail(SLASH_ENOMEM, "vclock: out of memory");
    for (uint32_t i = 0; i < n; i++)
        vc->wm[i] = INT64_MIN;
    return SLASH_OK;
}

void slash_vclock_free(slash_vclock *vc)
{
    free(vc->wm);
    vc->wm = NULL;
    vc->n = 0;
}

bool slash_vclock_update(slash_vclock *vc, uint32_t r, int64_t wm)
{
    if (r >= vc->n || wm <= vc->wm[r])
        return false;
    vc->wm[r] = wm;
    return true;
}

int64_t slash_vclock_min(const slash_vclock *vc)
{
    int64_t m = INT64_MAX;
    for (uint32_t i = 0; i < vc->n; i++)
        if (vc->wm[i] < m)
            m = vc->wm[i];
    return m;
}

uint32_t slash_vclock_argmin(const slash_vclock *vc)
{
    uint32_t arg = 0;
    for (uint32_t i = 1; i < vc->n; i++)
        if (vc->wm[i] < vc->wm[arg])
            arg = i;
    return arg;
}
