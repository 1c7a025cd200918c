package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
)

func init() {
	commands["admin-tokens"] = command{"manage named admin tokens through the admin API: create, list, revoke", runAdminTokens}
}

// runAdminTokens is a thin client of /vault/admin_tokens.
func runAdminTokens(ctx context.Context, args []string, env Env) error {
	fs := flagSet("admin-tokens", `Manages named admin tokens through a running keybrake's admin API and prints its JSON:

  keybrake admin-tokens create alice --role admin     (prints the token once)
  keybrake admin-tokens create grafana --role viewer  (viewer: reads only)
  keybrake admin-tokens list
  keybrake admin-tokens revoke grafana

Tokens are stored as SHA-256 hashes; every change is in GET /vault/audit
with the name of the token that made it. The calling token (an admin)
comes from KEYBRAKE_ADMIN_TOKEN. Flags may come before or after the
arguments.

Usage: keybrake admin-tokens [flags] <create|list|revoke> [name]`, env)
	base := fs.String("url", envDefault(env, "KEYBRAKE_URL", "http://127.0.0.1:8080"), "keybrake's admin base URL, the --admin-addr one if set (KEYBRAKE_URL)")
	role := fs.String("role", "", "create: admin (changes keys and tokens) or viewer (only reads)")
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
		return fmt.Errorf("admin-tokens: no action given: want create, list or revoke")
	}
	action, rest := rest[0], rest[1:]
	var method, path, body string
	switch action {
	case "create":
		if len(rest) != 1 {
			return fmt.Errorf("admin-tokens create: want one name, e.g. `admin-tokens create alice --role admin`")
		}
		if *role != "admin" && *role != "viewer" {
			return fmt.Errorf("admin-tokens create: --role must be admin or viewer")
		}
		method, path, body = "POST", "/vault/admin_tokens", fmt.Sprintf(`{"name":%q,"role":%q}`, rest[0], *role)
	case "list":
		if len(rest) != 0 {
			return fmt.Errorf("admin-tokens list takes no arguments")
		}
		method, path = "GET", "/vault/admin_tokens"
	case "revoke":
		if len(rest) != 1 {
			return fmt.Errorf("admin-tokens revoke: want one name")
		}
		method, path = "POST", "/vault/admin_tokens/"+url.PathEscape(rest[0])+"/revoke"
	default:
		return fmt.Errorf("admin-tokens: unknown action %q: want create, list or revoke", action)
	}
	if *role != "" && action != "create" {
		return fmt.Errorf("admin-tokens %s: --role is for create", action)
	}
	token := envDefault(env, "KEYBRAKE_ADMIN_TOKEN", "")
	if token == "" {
		return fmt.Errorf("KEYBRAKE_ADMIN_TOKEN is not set: export an admin token (the one keybrake serve was started with, or printed)")
	}
	_, err = adminCall(ctx, env, strings.TrimSuffix(u.String(), "/")+path, method, token, body)
	return err
}
