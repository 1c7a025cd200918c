package twilio

import (
	"encoding/base64"
	"strings"

	"github.com/keybrake/keybrake"
)

// Credentials are what a Twilio client sends in its Authorization header:
// HTTP Basic with an account sid (AC…) or an API key sid (SK…) as user and
// the auth token or API key secret as password. Through keybrake the
// password is the vault key.
type Credentials struct {
	Username string // AC… or SK…
	Password string
}

// APIKey reports whether the user is an API key sid rather than the
// account sid.
func (c Credentials) APIKey() bool { return IsAPIKeySid(c.Username) }

// ParseAuth reads an Authorization header as Twilio's SDKs send it.
//
// Returns EUNAUTHORIZED for a missing header, a scheme other than Basic, a
// malformed encoding, a user that is neither an AC… nor an SK… sid, or an
// empty password. It never repeats the password in its message.
func ParseAuth(header string) (Credentials, error) {
	scheme, encoded, ok := strings.Cut(header, " ")
	if header == "" {
		return Credentials{}, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: send the account sid as user and the vault key as password (HTTP Basic).")
	}
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return Credentials{}, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: Twilio uses HTTP Basic authentication (the account sid as user, the vault key as password).")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
	if err != nil {
		return Credentials{}, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: the Basic credentials are not valid base64.")
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok || pass == "" {
		return Credentials{}, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: the Basic credentials have no password; send the vault key as password.")
	}
	if !IsAccountSid(user) && !IsAPIKeySid(user) {
		return Credentials{}, keybrake.Errorf(keybrake.EUNAUTHORIZED, "Authenticate: the user must be an account sid (AC…) or an API key sid (SK…).")
	}
	return Credentials{Username: user, Password: pass}, nil
}

// AlnumVaultKeyPrefix starts the form of a vault key that Twilio's SDKs
// accept as a password. twilio-go refuses any password that is not
// alphanumeric (error 21224, before sending anything), and a vault key
// has underscores, so a Twilio client sends vaultkey… instead of
// vault_key_…; the random part of a vault key is alphanumeric, so the two
// forms name the same key.
const AlnumVaultKeyPrefix = "vaultkey"

// VaultKey returns the vault key a Twilio password carries, in its
// canonical vault_key_… form, and whether the password looks like one.
func VaultKey(password string) (string, bool) {
	if rest, ok := strings.CutPrefix(password, keybrake.VaultKeyPrefix); ok {
		return password, rest != ""
	}
	if rest, ok := strings.CutPrefix(password, AlnumVaultKeyPrefix); ok && rest != "" && alnum(rest) {
		return keybrake.VaultKeyPrefix + rest, true
	}
	return "", false
}

// AlnumVaultKey returns the form of a vault_key_… that Twilio's SDKs
// accept as a password.
func AlnumVaultKey(vaultKey string) string {
	if rest, ok := strings.CutPrefix(vaultKey, keybrake.VaultKeyPrefix); ok {
		return AlnumVaultKeyPrefix + rest
	}
	return vaultKey
}

func alnum(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return false
		}
	}
	return true
}

// BasicAuth returns the Authorization header value that authenticates
// user (an AC… or SK… sid) with secret: how the proxy injects the real
// credentials.
func BasicAuth(user, secret string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+secret))
}
