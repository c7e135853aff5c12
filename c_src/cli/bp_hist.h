/* bp_hist.h -- log-linear latency histogram with bounded memory, for the
 * p50/p99 of `beamprobe stats`.
 *
 * Values below 16 ns have a bucket each; above, every power of two is cut
 * into 16 linear sub-buckets, so a percentile is exact to within 1/16
 * (6.25%) of its value, then clamped to the observed min and max.
 * 976 buckets of u32 (3.9 KiB), whatever the number of samples.
 */
#ifndef BP_HIST_H
#define BP_HIST_H

#include <stdint.h>

#define BP_HIST_SUB 16
#define BP_HIST_BUCKETS (BP_HIST_SUB + 60 * BP_HIST_SUB)

struct bp_hist {
	uint64_t n, min, max;
	uint32_t count[BP_HIST_BUCKETS];
};

/* Empties h. */
void bp_hist_init(struct bp_hist *h);

/* Adds one sample (ns).  Counts saturate at UINT32_MAX per bucket. */
void bp_hist_add(struct bp_hist *h, uint64_t v);

/* The q-quantile (0 < q <= 1) of the samples, 0 if there are none:
 * the middle of the bucket holding it, clamped to [min, max]. */
uint64_t bp_hist_quantile(const struct bp_hist *h, double q);

#endif /* BP_HIST_H */
