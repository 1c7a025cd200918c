package resend

import (
	"strings"

	"github.com/keybrake/keybrake"
)

// ParseAuth reads the Authorization header as Resend's SDKs send it:
// "Bearer <key>". Through keybrake the key is the vault key. Returns
// EUNAUTHORIZED for a missing header, another scheme or an empty key; the
// message never repeats the key.
func ParseAuth(header string) (string, error) {
	scheme, token, ok := strings.Cut(header, " ")
	switch {
	case header == "":
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "Missing API key in the authorization header. Send the vault key as `Authorization: Bearer <key>`.")
	case !ok || !strings.EqualFold(scheme, "Bearer"):
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "Resend uses bearer authentication: send the vault key as `Authorization: Bearer <key>`.")
	}
	token = strings.TrimSpace(token)
	if token == "" || strings.ContainsAny(token, " \t") {
		return "", keybrake.Errorf(keybrake.EUNAUTHORIZED, "API key is invalid.")
	}
	return token, nil
}

// BearerAuth returns the Authorization header value for apiKey: how the
// proxy injects the real re_… key.
func BearerAuth(apiKey string) string { return "Bearer " + apiKey }
