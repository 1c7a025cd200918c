package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

func init() {
	commands["approvals"] = command{"list, approve or deny requests waiting for a person (above a key's approval threshold)", runApprovals}
}

// runApprovals is a thin client of /vault/approvals.
func runApprovals(ctx context.Context, args []string, env Env) error {
	fs := flagSet("approvals", `Lists, approves or denies the requests keybrake holds for a person's
approval, through a running keybrake's admin API, and prints its JSON:

  keybrake approvals list                 (pending ones; --state all for every one)
  keybrake approvals list --key vk_…      (one key's)
  keybrake approvals approve apr_…
  keybrake approvals deny apr_…

An approved request goes through when the client retries it with the same
Idempotency-Key and the same parameters before the approval expires. Every
decision is audited with the name of the admin token that made it (GET
/vault/audit). The token comes from KEYBRAKE_ADMIN_TOKEN. Flags may come
before or after the arguments.

Usage: keybrake approvals [flags] <list|approve|deny> [approval id]`, env)
	base := fs.String("url", envDefault(env, "KEYBRAKE_URL", "http://127.0.0.1:8080"), "keybrake's admin base URL, the --admin-addr one if set (KEYBRAKE_URL)")
	state := fs.String("state", "pending", "list: pending, approved, denied, used, or all")
	key := fs.String("key", "", "list: only this key's approvals")
	rest, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	u, err := url.Parse(*base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("invalid --url (KEYBRAKE_URL) %q: want keybrake's base URL like http://127.0.0.1:8080", *base)
	}
	if len(rest) == 0 {
		fs.Usage()
		return fmt.Errorf("approvals: no action given: want list, approve or deny")
	}
	action, rest := rest[0], rest[1:]
	var method, path string
	switch action {
	case "list":
		if len(rest) != 0 {
			return fmt.Errorf("approvals list takes no arguments")
		}
		q := url.Values{}
		switch *state {
		case "all":
		case "pending", "approved", "denied", "used":
			q.Set("state", *state)
		default:
			return fmt.Errorf("approvals list: --state must be pending, approved, denied, used or all")
		}
		if *key != "" {
			q.Set("key", *key)
		}
		method, path = "GET", "/vault/approvals?"+q.Encode()
	case "approve", "deny":
		if len(rest) != 1 || !strings.HasPrefix(rest[0], "apr_") {
			return fmt.Errorf("approvals %s: want one approval id (apr_…)", action)
		}
		method, path = "POST", "/vault/approvals/"+url.PathEscape(rest[0])+"/"+action
	default:
		return fmt.Errorf("approvals: unknown action %q: want list, approve or deny", action)
	}
	token := envDefault(env, "KEYBRAKE_ADMIN_TOKEN", "")
	if token == "" {
		return fmt.Errorf("KEYBRAKE_ADMIN_TOKEN is not set: export an admin token (the one keybrake serve was started with, or printed)")
	}
	_, err = adminCall(ctx, env, strings.TrimSuffix(u.String(), "/")+path, method, token, "")
	return err
}
