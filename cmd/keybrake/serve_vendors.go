package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twilio"
	"github.com/keybrake/keybrake/twiliosim"
)

// vendorHelp is serve's --help on the Twilio and Resend credentials.
const vendorHelp = `
  TWILIO_ACCOUNT_SID     the Twilio account (AC…) /twilio/… proxies; with
  TWILIO_AUTH_TOKEN      its auth token, or
  TWILIO_API_KEY         an API key (SK…) and
  TWILIO_API_SECRET      its secret; unset = the built-in Twilio simulator
  RESEND_API_KEY         the real Resend key (re_…); unset = the built-in Resend simulator`

// VendorConfig is serve's configuration of the vendors beside Stripe.
type VendorConfig struct {
	TwilioUpstream string        // --twilio-upstream
	TwilioRates    string        // --twilio-rates: a file in twilio.ParseRates' format
	TwilioMaxCall  int           // --twilio-max-call-seconds
	TwilioSkew     time.Duration // --twilio-lookup-skew
	TwilioSpeech   string        // --twilio-speech-per-100, USD
	TwilioVoice    string        // --twilio-default-voice
	ResendUpstream string        // --resend-upstream
	ResendPerEmail string        // --resend-per-email, USD
	ResendPerRcpt  string        // --resend-per-recipient, USD
}

func vendorFlags(fs *flag.FlagSet, env Env, c *VendorConfig) {
	fs.StringVar(&c.TwilioUpstream, "twilio-upstream", envDefault(env, "KEYBRAKE_TWILIO_UPSTREAM", "https://api.twilio.com"), "Twilio API base URL (KEYBRAKE_TWILIO_UPSTREAM)")
	fs.StringVar(&c.TwilioRates, "twilio-rates", envDefault(env, "KEYBRAKE_TWILIO_RATES", ""), "file of per-country Twilio rates, one country a line (\"US sms=0.0110 voice=0.0140\"); unset = an example table (KEYBRAKE_TWILIO_RATES)")
	fs.IntVar(&c.TwilioMaxCall, "twilio-max-call-seconds", envInt(env, "KEYBRAKE_TWILIO_MAX_CALL_SECONDS", 0), "longest call a key may place; calls without TimeLimit are priced at it and get it as TimeLimit (KEYBRAKE_TWILIO_MAX_CALL_SECONDS)")
	fs.StringVar(&c.TwilioSpeech, "twilio-speech-per-100", envDefault(env, "KEYBRAKE_TWILIO_SPEECH_PER_100", twilio.DefaultSpeechPer100.String()), "USD reserved per started 100 characters a call's <Say> speaks in a voice other than man or woman, per loop (KEYBRAKE_TWILIO_SPEECH_PER_100)")
	fs.StringVar(&c.TwilioVoice, "twilio-default-voice", envDefault(env, "KEYBRAKE_TWILIO_DEFAULT_VOICE", ""), "the Twilio account's default text-to-speech voice, as its Console sets it; a <Say> without voice speaks in it. Unset prices such a <Say> like Polly; man or woman makes it free (KEYBRAKE_TWILIO_DEFAULT_VOICE)")
	fs.DurationVar(&c.TwilioSkew, "twilio-lookup-skew", envDuration(env, "KEYBRAKE_TWILIO_LOOKUP_SKEW", time.Minute), "margin of the lookup of a Twilio create whose answer was lost, for clock skew and Twilio's list catching up; it is looked up once --upstream-timeout plus twice this has passed (KEYBRAKE_TWILIO_LOOKUP_SKEW)")
	fs.StringVar(&c.ResendUpstream, "resend-upstream", envDefault(env, "KEYBRAKE_RESEND_UPSTREAM", "https://api.resend.com"), "Resend API base URL (KEYBRAKE_RESEND_UPSTREAM)")
	// Resend counts every to, cc and bcc address as one email of the quota
	// it bills, so the default prices recipients, not requests.
	fs.StringVar(&c.ResendPerEmail, "resend-per-email", envDefault(env, "KEYBRAKE_RESEND_PER_EMAIL", "0"), "USD reserved per email sent, whatever its recipients (KEYBRAKE_RESEND_PER_EMAIL)")
	fs.StringVar(&c.ResendPerRcpt, "resend-per-recipient", envDefault(env, "KEYBRAKE_RESEND_PER_RECIPIENT", "0.001"), "USD reserved per recipient (to, cc and bcc; Resend bills each as an email), added to the per-email rate (KEYBRAKE_RESEND_PER_RECIPIENT)")
}

// openVendors configures /twilio/… and /resend/… on s: with the real
// credentials from the environment, or else with the built-in simulators
// as upstreams, said in the log exactly like Stripe's.
func (m *ServeMain) openVendors(s *khttp.Server) error {
	c, env := m.Config.Vendors, m.Env
	rates := twilio.DefaultRates()
	if c.TwilioRates != "" {
		b, err := os.ReadFile(c.TwilioRates)
		if err != nil {
			return fmt.Errorf("--twilio-rates: %w", err)
		}
		if rates, err = twilio.ParseRates(string(b)); err != nil {
			return fmt.Errorf("--twilio-rates %s: %w", c.TwilioRates, err)
		}
	}
	if c.TwilioSkew <= 0 {
		return fmt.Errorf("invalid --twilio-lookup-skew (KEYBRAKE_TWILIO_LOOKUP_SKEW): must be a positive duration like 1m")
	}
	speech, err := keybrake.ParseUSD(c.TwilioSpeech)
	if err != nil || speech <= 0 {
		return fmt.Errorf("invalid --twilio-speech-per-100 %q (KEYBRAKE_TWILIO_SPEECH_PER_100): want dollars above zero, like 0.05", c.TwilioSpeech)
	}
	tw := &khttp.TwilioConfig{Rates: rates, MaxCallSeconds: c.TwilioMaxCall, LookupSkew: c.TwilioSkew, SpeechPer100: speech, DefaultVoice: c.TwilioVoice,
		AccountSid: strings.TrimSpace(env.Getenv("TWILIO_ACCOUNT_SID")), Secret: strings.TrimSpace(env.Getenv("TWILIO_AUTH_TOKEN"))}
	if k := strings.TrimSpace(env.Getenv("TWILIO_API_KEY")); k != "" {
		tw.APIKeySid, tw.Secret = k, strings.TrimSpace(env.Getenv("TWILIO_API_SECRET"))
	}
	switch {
	case tw.AccountSid == "" && tw.Secret == "" && tw.APIKeySid == "":
		sim := twiliosim.New(twiliosim.Options{Now: m.Now, Logger: m.logger.With("component", "twiliosim")})
		u, err := m.serveSim(sim)
		if err != nil {
			return err
		}
		tw.Upstream, tw.AccountSid, tw.Secret, tw.Simulated = u, sim.AccountSid(), twiliosim.DefaultAuthToken, true
		m.logger.Warn("NO TWILIO CREDENTIALS CONFIGURED: /twilio is served by keybrake's built-in Twilio SIMULATOR; nothing is sent. Set TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN (or TWILIO_API_KEY and TWILIO_API_SECRET).", "simulator", u.String(), "account_sid", tw.AccountSid)
	case !twilio.IsAccountSid(tw.AccountSid) || tw.Secret == "" || (tw.APIKeySid != "" && !twilio.IsAPIKeySid(tw.APIKeySid)):
		return fmt.Errorf("invalid Twilio credentials: set TWILIO_ACCOUNT_SID (AC…) and TWILIO_AUTH_TOKEN, or TWILIO_ACCOUNT_SID with TWILIO_API_KEY (SK…) and TWILIO_API_SECRET")
	default:
		u, err := vendorUpstream("--twilio-upstream", c.TwilioUpstream)
		if err != nil {
			return err
		}
		tw.Upstream = u
	}
	s.Twilio = tw

	var rs khttp.ResendConfig
	if rs.Pricer.PerEmail, err = keybrake.ParseUSD(c.ResendPerEmail); err != nil {
		return fmt.Errorf("invalid --resend-per-email %q: %w", c.ResendPerEmail, err)
	}
	if rs.Pricer.PerRecipient, err = keybrake.ParseUSD(c.ResendPerRcpt); err != nil {
		return fmt.Errorf("invalid --resend-per-recipient %q: %w", c.ResendPerRcpt, err)
	}
	if rs.APIKey = strings.TrimSpace(env.Getenv("RESEND_API_KEY")); rs.APIKey == "" {
		u, err := m.serveSim(resendsim.New(resendsim.Options{Now: m.Now, Logger: m.logger.With("component", "resendsim")}))
		if err != nil {
			return err
		}
		rs.Upstream, rs.APIKey, rs.Simulated = u, resendsim.DefaultAPIKey, true
		m.logger.Warn("NO RESEND API KEY CONFIGURED: /resend is served by keybrake's built-in Resend SIMULATOR; no email is sent. Set RESEND_API_KEY.", "simulator", u.String())
	} else if strings.HasPrefix(rs.APIKey, keybrake.VaultKeyPrefix) {
		return fmt.Errorf("invalid RESEND_API_KEY: a vault key cannot be the upstream key")
	} else if rs.Upstream, err = vendorUpstream("--resend-upstream", c.ResendUpstream); err != nil {
		return err
	}
	s.Resend = &rs
	return nil
}

// vendorUpstream reads the base URL a vendor's real credential is sent
// to: http(s), a host, no user, query or fragment, and plain http only to
// a loopback address (a simulator on this machine), never across a
// network where the credential would travel in clear text. Only the
// operator sets it: no request header or parameter can move a route to
// another upstream.
func vendorUpstream(flagName, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("invalid %s %q: want an http(s) base URL like https://api.example.com", flagName, raw)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return nil, fmt.Errorf("invalid %s %q: plain http only to a loopback address (a local simulator); the real credential would cross the network in clear text", flagName, raw)
	}
	return u, nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// serveSim serves a simulator on a loopback port of its own, reached over
// real HTTP like the vendor.
func (m *ServeMain) serveSim(h http.Handler) (*url.URL, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("start a simulator: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	m.vendorSims = append(m.vendorSims, srv)
	go srv.Serve(ln)
	return url.Parse("http://" + ln.Addr().String())
}
