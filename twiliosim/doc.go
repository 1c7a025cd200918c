// Package twiliosim is a stateful simulator of the part of Twilio's REST
// API that keybrake proxies, with fault injection and ground truth, in the
// style of stripesim.
//
// # API
//
// Under /2010-04-01/Accounts/{AccountSid}/, authenticated with HTTP Basic
// (the account sid and its auth token, or an API key sid SK… and its
// secret, from Options):
//
//	POST   Messages.json               To, From or MessagingServiceSid, Body and/or MediaUrl, SendAt+ScheduleType=fixed, StatusCallback
//	GET    Messages.json               To=, From=, DateSent=, DateSent<=, DateSent>=, PageSize=, Page=
//	GET    Messages/{SM…}.json
//	POST   Messages/{SM…}.json         Body= (redact, once final), Status=canceled (a scheduled message)
//	DELETE Messages/{SM…}.json         once final
//	POST   Calls.json                  To, From, Url or Twiml, TimeLimit, Timeout, StatusCallback
//	GET    Calls.json                  To=, From=, Status=, PageSize=, Page=
//	GET    Calls/{CA…}.json
//	POST   Calls/{CA…}.json            Status=completed (hang up) or canceled (before it is answered)
//	GET    {AccountSid}.json           the account, with its auth_token, as Twilio answers it
//	GET    IncomingPhoneNumbers.json   Options.Numbers
//	GET    Balance.json                the starting balance minus what was billed
//
// Answers and errors have Twilio's shapes: resources in snake_case with
// RFC 1123 dates, list pages with next_page_uri, errors as
// {"code", "message", "more_info", "status"}. Twilio has no idempotency
// for creation, and neither has the simulator: a retried create sends
// again.
//
// # Time
//
// On the simulator clock (Options.Now plus every Advance), a message is
// queued, sending after 1 s, sent after 2 s (its price is set then, a
// negative decimal string such as "-0.00790", and date_sent), and
// delivered after 4 s; a scheduled message waits for SendAt first. A call
// is queued, ringing after 1 s, in-progress after 5 s, and completed
// Options.CallSeconds later (or at its TimeLimit), when its duration and
// price are set; ending it early bills the minutes so far. Prices come
// from Options.Rates at Twilio's rules (segments × SMS rate, one MMS, or
// started minutes × voice rate). A completed call's <Say>s in a voice
// other than man or woman (a <Say> without voice speaks in
// Options.DefaultVoice, the Console's default) are billed apart from its price, as Twilio bills
// text-to-speech: Options.SpeechPer100 per started 100 characters of each
// repetition (loop="0" repeats for the call's duration); Billed counts
// them. To +15005550001 is refused as invalid (21211), as with Twilio's
// test credentials. A message To FailingTo (+15005550012) is accepted and
// fails 2 s later (error 30008); its price reads "0.00000" and Billed
// counts Twilio's failed-message processing fee of $0.001.
//
// # Admin
//
// Under /_sim/, without authentication: GET /_sim/objects (GroundTruth),
// GET /_sim/billed (Billed), the fault API of internal/simfault at
// /_sim/faults, GET /_sim/clock and POST /_sim/clock/advance
// {"seconds": N}.
//
// # Faults
//
// As stripesim's: fail_before answers 500 without creating anything;
// fail_after creates (the message is sent, the call placed) and answers
// 500; cut_after creates and closes the connection. Without idempotency
// these are the windows in which a client cannot know whether it spent.
package twiliosim
