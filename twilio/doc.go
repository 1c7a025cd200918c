// Package twilio is keybrake's knowledge of the Twilio REST API
// (api.twilio.com/2010-04-01): which requests exist and what they are
// called, how their form bodies and credentials are read, what a message or
// a call can cost, and how Twilio shapes its errors. It does no I/O and
// holds no policy: the request path decides what a key may do with what
// this package reports.
//
// # Operations
//
// Paths are read after any /twilio prefix; AccountSid is the AC… account in
// the path:
//
//	POST   /2010-04-01/Accounts/{AccountSid}/Messages.json          messages.create   priced
//	GET    /2010-04-01/Accounts/{AccountSid}/Messages.json          messages.list     read
//	GET    /2010-04-01/Accounts/{AccountSid}/Messages/{SM…}.json    messages.fetch    read
//	POST   /2010-04-01/Accounts/{AccountSid}/Messages/{SM…}.json    messages.update   write (Body="" redacts, Status=canceled cancels a scheduled message)
//	DELETE /2010-04-01/Accounts/{AccountSid}/Messages/{SM…}.json    messages.delete   write
//	POST   /2010-04-01/Accounts/{AccountSid}/Calls.json             calls.create      priced
//	GET    /2010-04-01/Accounts/{AccountSid}/Calls.json             calls.list        read
//	GET    /2010-04-01/Accounts/{AccountSid}/Calls/{CA…}.json       calls.fetch       read
//	POST   /2010-04-01/Accounts/{AccountSid}/Calls/{CA…}.json       calls.update      write (Status=completed or canceled ends the call)
//	GET    /2010-04-01/Accounts/{AccountSid}.json                   accounts.fetch    read
//	GET    /2010-04-01/Accounts/{AccountSid}/IncomingPhoneNumbers.json  incoming_phone_numbers.list  read
//	GET    /2010-04-01/Accounts/{AccountSid}/Balance.json           balance.fetch     read
//
// Every other path and method is unknown and refused (default deny): buying
// numbers, conferences, recordings, sub-accounts, API keys, and the other
// Twilio hosts (messaging.twilio.com, verify.twilio.com, …).
//
// # Money
//
// A message costs segments × the destination country's SMS rate, or, with
// any MediaUrl, one MMS at the country's MMS rate; keybrake reserves an MMS
// at no less than the SMS that Twilio's MMS Converter sends instead to a
// carrier without MMS (see Segments, ConvertedBody and Rates). A call costs its TimeLimit, rounded up to whole minutes, × the
// country's per-minute rate. Twilio reports the real price later, on the
// resource, as a negative decimal string ("-0.00790"); ParsePrice reads it.
// Twilio has no idempotency for creation: a create whose answer was lost
// may or may not have happened, and is found again by its To, From and
// creation time, never by replaying it.
package twilio
