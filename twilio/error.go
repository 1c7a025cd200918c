package twilio

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/keybrake/keybrake"
)

// Error is an error as Twilio answers it, and as twilio-go's
// TwilioRestError and the other SDKs decode it:
//
//	{"code": 20003, "message": "…", "more_info": "https://www.twilio.com/docs/errors/20003", "status": 401}
type Error struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

// Error implements error.
func (e *Error) Error() string {
	return "twilio error " + strconv.Itoa(e.Code) + ": " + e.Message
}

// Body returns the JSON body of the error.
func (e *Error) Body() []byte {
	b, _ := json.Marshal(e)
	return b
}

// NewError returns an error with Twilio's code, status and the more_info
// link Twilio derives from the code.
func NewError(status, code int, message string) *Error {
	return &Error{Code: code, Message: message, Status: status,
		MoreInfo: "https://www.twilio.com/docs/errors/" + strconv.Itoa(code)}
}

// Twilio error codes keybrake answers with. A refusal by policy or a cap
// uses Twilio's own code for the nearest case, so that SDKs and agents
// treat it the way they treat Twilio's.
const (
	CodeInvalidParameter = 21211 // reused for EINVALID; the message names the parameter
	CodeAuthenticate     = 20003 // "Authenticate"
	CodeForbidden        = 20403 // "Forbidden": not allowed by the key's policy
	CodeNotFound         = 20404 // "The requested resource was not found"
	CodeConflict         = 20409 // "Conflict"
	CodeTooManyRequests  = 20429 // "Too Many Requests": a spend or count cap
	CodeInternal         = 20500 // "Internal Server Error"
	CodeUnavailable      = 20503 // "Service Unavailable": the store or upstream
)

// codes maps keybrake's error codes to Twilio's code and HTTP status.
var codes = map[string][2]int{
	keybrake.EINVALID:      {CodeInvalidParameter, http.StatusBadRequest},
	keybrake.EUNAUTHORIZED: {CodeAuthenticate, http.StatusUnauthorized},
	keybrake.EFORBIDDEN:    {CodeForbidden, http.StatusForbidden},
	keybrake.ENOTFOUND:     {CodeNotFound, http.StatusNotFound},
	keybrake.ECONFLICT:     {CodeConflict, http.StatusConflict},
	keybrake.EOVERCAP:      {CodeTooManyRequests, http.StatusTooManyRequests},
	keybrake.EAPPROVAL:     {CodeForbidden, http.StatusForbidden}, // not reached: Twilio has no key to match an approval by
	keybrake.EUNAVAILABLE:  {CodeUnavailable, http.StatusServiceUnavailable},
	keybrake.EINTERNAL:     {CodeInternal, http.StatusInternalServerError},
}

// ErrorFor renders a keybrake error as Twilio does, with keybrake's
// message (which is safe to show; an error that is not a *keybrake.Error
// becomes a generic internal error).
func ErrorFor(err error) *Error {
	c, ok := codes[keybrake.ErrorCode(err)]
	if !ok {
		c = codes[keybrake.EINTERNAL]
	}
	return NewError(c[1], c[0], keybrake.ErrorMessage(err))
}
