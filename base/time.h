/* Clocks. Thread-safe. */
#ifndef KILN_BASE_TIME_H
#define KILN_BASE_TIME_H

#include <stdint.h>

/* Monotonic time in nanoseconds (CLOCK_MONOTONIC): for durations. */
int64_t kiln_time_monotonic_ns(void);
/* The same clock in milliseconds: for timeouts and deadlines counted in ms. */
static inline int64_t kiln_time_monotonic_ms(void) { return kiln_time_monotonic_ns() / 1000000; }
/* Wall-clock time in unix milliseconds: for timestamps users see. */
int64_t kiln_time_unix_ms(void);

#endif /* KILN_BASE_TIME_H */
