package twilio

import (
	"bytes"
	"encoding/json"
)

// secretFields are the fields of a Twilio answer that carry a credential:
// accounts.fetch answers with the account's auth_token.
var secretFields = []string{"auth_token"}

// Redact returns body, the 2xx answer of op, with every credential it
// carries removed, so that the real auth token never reaches the client
// holding only a vault key. An answer that is not a JSON object is
// returned as is, unless op answers with credentials: then nothing of it
// can be passed on and Redact returns ok=false.
func Redact(op Operation, body []byte) (out []byte, ok bool) {
	if op.Name != "accounts.fetch" {
		return body, true
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || dec.More() {
		return nil, false
	}
	for _, f := range secretFields {
		delete(fields, f)
	}
	out, err := json.Marshal(fields)
	return out, err == nil
}
