package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// days is a duration flag that also takes whole days ("90d"), as retention
// is thought of; "0" or "off" keeps everything.
type days struct{ d *time.Duration }

func (v days) String() string {
	if v.d == nil {
		return ""
	}
	if *v.d == 0 {
		return "off"
	}
	if *v.d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", *v.d/(24*time.Hour))
	}
	return v.d.String()
}

func (v days) Set(s string) error {
	d, err := parseDays(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// parseDays reads "90d", "36h", "0" or "off".
func parseDays(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "off" || s == "0":
		return 0, nil
	case strings.HasSuffix(s, "d"):
		n, err := strconv.Atoi(strings.TrimSuffix(s, "d"))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want whole days like 90d, a duration like 72h, or off")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want whole days like 90d, a duration like 72h, or off")
	}
	return d, nil
}

// retentionFlags adds --retention, --sent-retention and
// --retention-interval to fs.
func retentionFlags(fs *flag.FlagSet, env Env, age, sent, interval *time.Duration) {
	for name, d := range map[string]*time.Duration{"KEYBRAKE_RETENTION": age, "KEYBRAKE_SENT_RETENTION": sent} {
		if v := envDefault(env, name, ""); v != "" {
			if p, err := parseDays(v); err == nil {
				*d = p
			} else {
				*d = -1 // caught, with the variable named, in validateRetention
			}
		}
	}
	fs.Var(days{age}, "retention", "delete audit events, settled and released reservations, spent holds and delivered alerts older than this, and compact closed spend counters, in small batches in the background; at least 2d; off keeps them (who sent each message: --sent-retention). Export first: keybrake events export (KEYBRAKE_RETENTION)")
	fs.Var(days{sent}, "sent-retention", "forget which vault key sent each Twilio message and call and Resend email after this long (a key reads, updates, cancels or deletes one by id only while keybrake remembers that it sent it; after, it gets the vendor's 404 for an unknown id); the default is the 13 months Twilio's API shows a message; at least 40d (a message may be scheduled 35 days ahead); off keeps every record (KEYBRAKE_SENT_RETENTION)")
	fs.DurationVar(interval, "retention-interval", envDuration(env, "KEYBRAKE_RETENTION_INTERVAL", *interval), "how often a retention pass starts (KEYBRAKE_RETENTION_INTERVAL)")
}

// validateRetention names the bad retention setting.
func validateRetention(age, sent, interval time.Duration) error {
	if age < 0 || (age > 0 && age < keybrake.MinRetention) {
		return fmt.Errorf("invalid --retention (KEYBRAKE_RETENTION): want off or at least %s (2d): Stripe may replay a request for 24 h, and its reservation must outlive that", keybrake.MinRetention)
	}
	if sent < 0 || (sent > 0 && sent < keybrake.MinSentRetention) {
		return fmt.Errorf("invalid --sent-retention (KEYBRAKE_SENT_RETENTION): want off or at least 40d: Twilio sends a message scheduled up to 35 days ahead, and its sender must still be able to cancel and read it")
	}
	if interval <= 0 {
		return fmt.Errorf("invalid --retention-interval (KEYBRAKE_RETENTION_INTERVAL): must be a positive duration like 10m")
	}
	return nil
}
