// Package resendsim is a stateful simulator of the part of Resend's API
// that keybrake proxies, with Resend's idempotency, fault injection and
// ground truth, in the style of stripesim.
//
// # API
//
// Authenticated with Authorization: Bearer <Options.APIKey>:
//
//	POST  /emails              send one email; from must be on a domain in Options.Domains
//	POST  /emails/batch        1 to 100 emails; all or none, or with x-batch-validation: permissive
//	                           the valid ones, the others listed in errors
//	GET   /emails              list, newest first
//	GET   /emails/{id}         with last_event
//	PATCH /emails/{id}         {"scheduled_at": RFC 3339} while scheduled
//	POST  /emails/{id}/cancel  while scheduled
//	GET   /domains             GET /domains/{id}
//
// Bodies are read with the resend package's strict parser, so a field it
// has not reviewed is a 422 here, where Resend would ignore it. Errors
// have Resend's shape, {"statusCode", "name", "message"}.
//
// Idempotency-Key (POST /emails and /emails/batch) follows Resend: the
// first 2xx answer is replayed for 24 hours of simulator time to a retry
// with the same body; another body is 409 invalid_idempotent_request;
// a retry while the first runs is 409 concurrent_idempotent_requests; an
// empty key or one over 256 characters is 400 invalid_idempotency_key.
//
// # Time
//
// On the simulator clock, an email's last_event is queued, sent after
// 1 s and delivered after 3 s; a scheduled one is scheduled until its
// time, and canceled if canceled first (it is then never sent or billed).
//
// # Admin
//
// Under /_sim/, without authentication: GET /_sim/objects (GroundTruth),
// GET /_sim/billed (Billed), faults at /_sim/faults (internal/simfault),
// GET /_sim/clock, POST /_sim/clock/advance {"seconds": N}.
//
// # Faults
//
// As stripesim's: latency holds the Idempotency-Key; fail_before answers
// 500 and sends nothing; fail_after sends, saves the idempotent answer,
// then answers 500; cut_after sends, saves, and closes the connection. A
// retry with the same Idempotency-Key after fail_after or cut_after gets
// the real answer and sends nothing more.
package resendsim
