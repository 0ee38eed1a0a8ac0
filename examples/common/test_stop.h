/* EX_TEST_STOP (tests only): stops one rank of an example at a named point,
 * as a hung machine or a process stopped by a debugger would, so that
 * tests/e2e/run_example_deadlines.sh can show the other ranks fail within
 * comm.timeout_s instead of hanging. It never runs unless the variable is
 * set. */
#ifndef EX_TEST_STOP_H
#define EX_TEST_STOP_H

/* With EX_TEST_STOP="POINT:RANK" (e.g. "validation:1") and this rank and
 * point, prints "<program>: rank R (pid P): EX_TEST_STOP=...: stopping at
 * 'POINT'" to stderr (the pid lets the test end the process afterwards) and
 * raises SIGSTOP on this process. Anything else returns at once. */
void ex_test_stop(const char *program, const char *point, int rank);

#endif
