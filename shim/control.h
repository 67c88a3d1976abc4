/* The shim's side of the control channel (wire/proto.h): a thread of
 * its own that registers this EST with easyscale-ctl, sends heartbeats
 * (step, step time) and answers the controller's MOVE commands through
 * shim/move.h. Started by the constructor only when EASYSCALE_CONTROL is
 * set.
 *
 * The application never waits for it: the thread takes no lock of the
 * shim's, sleeps in poll(2) between heartbeats, reconnects with backoff when
 * the controller goes away (it can be restarted and re-learns the job from
 * the re-registrations), and never makes a process fail or exit. Only the
 * process the controller started (or what it execs) registers: the thread
 * marks the environment with EASYSCALE_EST_PID, and a descendant that loads
 * the shim with the same variables (a data-loader worker started with
 * exec) sees another pid there and starts no thread.
 */
#ifndef ES_SHIM_CONTROL_H
#define ES_SHIM_CONTROL_H

/* Starts the control thread when es_cfg.control is set (a no-op
 * otherwise). Returns 0 or a negative errno (the shim logs it and carries
 * on without a control channel). Call once, from the constructor. */
int es_control_start(void);

#endif
