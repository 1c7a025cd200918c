// Package resend is keybrake's knowledge of the Resend email API
// (api.resend.com): which requests exist and what they are called, how
// their JSON bodies and credentials are read, what they cost and count,
// Resend's Idempotency-Key rules, and how Resend shapes its errors. It
// does no I/O and holds no policy.
//
// # Operations
//
// Paths are read after any /resend prefix:
//
//	POST  /emails               emails.send     priced: one email
//	POST  /emails/batch         emails.batch    priced: 1 to 100 emails, all reserved or none
//	GET   /emails               emails.list     read
//	GET   /emails/{id}          emails.get      read
//	PATCH /emails/{id}          emails.update   write (reschedules a scheduled email; scheduled_at only)
//	POST  /emails/{id}/cancel   emails.cancel   write (a canceled scheduled email is not sent)
//	GET   /domains              domains.list    read
//	GET   /domains/{id}         domains.get     read
//
// Every other path and method is refused (default deny): API keys,
// creating, verifying, updating or deleting domains, audiences, contacts,
// broadcasts, templates, webhooks, attachments of received email.
//
// # Money
//
// An email costs the operator's per-email rate plus, if set, a rate per
// recipient (to + cc + bcc, at most MaxRecipients). A scheduled email is
// reserved when it is created: it is sent later without passing keybrake
// again. Resend keeps an Idempotency-Key for 24 hours and answers a retry
// with the same body with the first response, so a request whose answer
// was lost is replayed with its key to learn what happened.
package resend
