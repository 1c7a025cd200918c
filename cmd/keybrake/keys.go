package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

func init() {
	commands["keys"] = command{"manage vault keys through the admin API: create, list, show, update, revoke, rotate, suspend, resume, events", runKeys}
}

var keyIDPattern = regexp.MustCompile(`^vk_[0-9A-Za-z]{1,64}$`)

// runKeys is a thin client of the admin API, so an operator needs no curl.
// It prints the API's JSON as it comes.
func runKeys(ctx context.Context, args []string, env Env) error {
	fs := flagSet("keys", `Manages vault keys through a running keybrake's admin API and prints its JSON:

  keybrake keys create '{"label":"billing-2026-11","daily_usd_cap":250,"allowed_endpoints":["/v1/charges"]}'
  keybrake keys create --allow-secret-reads '{"label":"issuing","allowed_endpoints":["issuing.cards.retrieve"]}'
  keybrake keys create '{"vendor":"twilio","daily_usd_cap":20,"daily_message_cap":500,"monthly_message_cap":5000,
    "twilio_scope":{"allowed_countries":["US","CA"],"allowed_number_prefixes":["+1415"],"allowed_from":["+14155550100"],
    "allowed_messaging_services":["MG…"]}}'
  keybrake keys create '{"vendor":"resend","daily_email_cap":200,"monthly_email_cap":5000,
    "resend_scope":{"allowed_senders":["billing@example.com","example.org"],"allowed_recipient_domains":["example.com"],
    "max_recipients":5}}'
  keybrake keys list [--limit N] [--starting-after vk_…]
  keybrake keys show vk_…
  keybrake keys update vk_… '{"daily_usd_cap":100}'
  keybrake keys update vk_… --guards '{"velocity":[{"name":"per_minute","per":"key","limit":60,"window_seconds":60}]}'
  keybrake keys update vk_… --guards @guards.json   (--guards '{}' removes every guard)
  keybrake keys revoke vk_…
  keybrake keys rotate vk_… [--grace-period 24h]   (prints the new vault key once)
  keybrake keys suspend vk_…                       (resume vk_… lifts it; revoke is final)
  keybrake keys events vk_… [--limit N]

The policy fields are those of POST /vault/keys (README.md, "Admin API").
Twilio keys take daily_ and monthly_message_cap and _call_cap and
twilio_scope (destination countries, number prefixes, From numbers,
messaging services); Resend keys take daily_ and monthly_email_cap and
resend_scope (senders, recipient domains, recipients per email); either on
another vendor's key is refused (docs/vendors.md, "Scope on keys").
The vault key is printed once, by create. A key created without
allowed_endpoints may call the default payments set, which create also
prints to stderr as a notice; ["*"] allows every operation. The admin token
comes from KEYBRAKE_ADMIN_TOKEN.

Flags may come before or after the arguments.

Usage: keybrake keys [flags] <create|list|show|update|revoke|rotate|suspend|resume|events> [args]`, env)
	base := fs.String("url", envDefault(env, "KEYBRAKE_URL", "http://127.0.0.1:8080"), "keybrake's base URL (KEYBRAKE_URL)")
	limit := fs.Int("limit", 10, "list, events: page size, 1 to 100")
	after := fs.String("starting-after", "", "list, events: the last id of the previous page")
	secretReads := fs.Bool("allow-secret-reads", false, "create, update: set allow_secret_reads, letting the key expand secrets (issuing card numbers, treasury account numbers, apps secrets); --allow-secret-reads=false clears it")
	guards := fs.String("guards", "", "create, update: the key's guards (README.md, \"Guards\"), as JSON or @file; checked here as the admin API checks them, except the field rules' CEL, which the API compiles; '{}' removes every guard")
	grace := fs.String("grace-period", "", "rotate: how long the previous secret keeps working, e.g. 24h (default: refused at once)")
	var err error
	// Flags may come anywhere: keys events vk_… --limit 20.
	if args, err = parseInterspersed(fs, args); err != nil {
		return err
	}
	token := envDefault(env, "KEYBRAKE_ADMIN_TOKEN", "")
	if token == "" {
		return fmt.Errorf("KEYBRAKE_ADMIN_TOKEN is not set: export the token keybrake serve was started with (or printed), or a named token from `keybrake admin-tokens create`")
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --url (KEYBRAKE_URL) %q: want keybrake's base URL like http://127.0.0.1:8080", *base)
	}
	if *limit < 1 || *limit > 100 {
		return fmt.Errorf("invalid --limit %d: want 1 to 100", *limit)
	}
	rest := args
	if len(rest) == 0 {
		fs.Usage()
		return fmt.Errorf("keys: no action given")
	}
	page := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *after != "" {
		page.Set("starting_after", *after)
	}
	action, rest := rest[0], rest[1:]
	needID := func(n int) (string, error) {
		if len(rest) != n || !keyIDPattern.MatchString(rest[0]) {
			return "", fmt.Errorf("keys %s: want a key id (vk_…)%s", action, map[bool]string{true: " and a JSON policy", false: ""}[n == 2])
		}
		return rest[0], nil
	}
	var method, path, body string
	switch action {
	case "create":
		if len(rest) != 1 {
			return fmt.Errorf("keys create: want one JSON policy argument")
		}
		method, path, body = "POST", "/vault/keys", rest[0]
	case "list":
		method, path = "GET", "/vault/keys?"+page.Encode()
	case "show", "revoke", "events", "rotate", "suspend", "resume":
		id, err := needID(1)
		if err != nil {
			return err
		}
		switch action {
		case "show":
			method, path = "GET", "/vault/keys/"+id
		case "revoke":
			method, path = "POST", "/vault/keys/"+id+"/revoke"
		case "events":
			method, path = "GET", "/vault/keys/"+id+"/events?"+page.Encode()
		case "rotate":
			method, path = "POST", "/vault/keys/"+id+"/rotate"
			if *grace != "" {
				if _, err := time.ParseDuration(*grace); err != nil {
					return fmt.Errorf("invalid --grace-period %q: want a duration like 24h or 90m", *grace)
				}
				body = fmt.Sprintf(`{"grace_period":%q}`, *grace)
			}
		case "suspend", "resume":
			method, path = "POST", "/vault/keys/"+id+"/"+action
		}
	case "update":
		id, err := needID(2)
		if err != nil {
			return err
		}
		method, path, body = "PATCH", "/vault/keys/"+id, rest[1]
	default:
		return fmt.Errorf("keys: unknown action %q: want create, list, show, update, revoke, rotate, suspend, resume or events", action)
	}
	if body != "" && !json.Valid([]byte(body)) {
		return fmt.Errorf("keys %s: the policy is not valid JSON", action)
	}
	if flagGiven(fs, "allow-secret-reads") {
		if body, err = withField(action, body, "allow_secret_reads", *secretReads); err != nil {
			return err
		}
	}
	if flagGiven(fs, "guards") {
		g, err := readGuards(*guards)
		if err != nil {
			return fmt.Errorf("keys %s: --guards: %w", action, err)
		}
		if body, err = withField(action, body, "guards", g); err != nil {
			return err
		}
	}
	out, err := adminCall(ctx, env, strings.TrimSuffix(u.String(), "/")+path, method, token, body)
	if err != nil {
		return err
	}
	var created struct {
		Notices []string `json:"notices"`
	}
	if json.Unmarshal(out, &created) == nil {
		for _, n := range created.Notices {
			fmt.Fprintf(env.Stderr, "keybrake keys %s: notice: %s\n", action, n)
		}
	}
	return nil
}

// flagGiven reports whether the flag was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// withField sets field in the JSON policy of create or update, refusing
// a policy that sets it too.
func withField(action, body, field string, v any) (string, error) {
	if action != "create" && action != "update" {
		return "", fmt.Errorf("keys %s: --%s is for create and update", action, strings.ReplaceAll(field, "_", "-"))
	}
	var policy map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &policy); err != nil {
		return "", fmt.Errorf("keys %s: the policy must be a JSON object", action)
	}
	if _, ok := policy[field]; ok {
		return "", fmt.Errorf("keys %s: %s is given both in the policy and as --%s", action, field, strings.ReplaceAll(field, "_", "-"))
	}
	policy[field], _ = json.Marshal(v)
	b, err := json.Marshal(policy)
	return string(b), err
}

// adminCall sends one admin request, prints the answer and returns it; an
// error status is an error carrying the API's message.
func adminCall(ctx context.Context, env Env, target, method, token, body string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("keybrake admin API: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message, Param string } `json:"error"`
		}
		if json.Unmarshal(out, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("keybrake admin API: %d %s: %s", resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return nil, fmt.Errorf("keybrake admin API: %d %s", resp.StatusCode, bytes.TrimSpace(out))
	}
	_, err = env.Stdout.Write(out)
	return out, err
}
