package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/resendsim"
	"github.com/keybrake/keybrake/twiliosim"
)

// startSim runs `keybrake NAME --addr ADDR` until the test ends and returns
// its base URL once it answers.
func startSim(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var stderr bytes.Buffer
	go func() {
		done <- main.Run(ctx, []string{name, "--addr", addr}, main.Env{Stdout: &bytes.Buffer{}, Stderr: &stderr, Getenv: func(string) string { return "" }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened on %s", name, addr)
		}
		select {
		case err := <-done:
			t.Fatalf("%s exited: %v", name, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestTwiliosimStandalone: `keybrake twiliosim` creates a message for its
// account's credentials and refuses others in Twilio's shape.
func TestTwiliosimStandalone(t *testing.T) {
	base := startSim(t, "twiliosim")
	send := func(token string) (int, map[string]any) {
		form := url.Values{"To": {"+14155550100"}, "From": {"+14155550199"}, "Body": {"hello"}}
		req, _ := http.NewRequest("POST", base+"/2010-04-01/Accounts/"+twiliosim.DefaultAccountSid+"/Messages.json", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(twiliosim.DefaultAccountSid, token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	if status, body := send(twiliosim.DefaultAuthToken); status != http.StatusCreated || !strings.HasPrefix(body["sid"].(string), "SM") {
		t.Fatalf("create = %d %v, want 201 with an SM sid", status, body)
	}
	if status, body := send("wrong"); status != http.StatusUnauthorized || body["code"] == nil {
		t.Fatalf("bad token = %d %v, want Twilio's 401 with a code", status, body)
	}
}

// TestResendsimStandalone: `keybrake resendsim` sends an email for its API
// key and replays an Idempotency-Key's answer.
func TestResendsimStandalone(t *testing.T) {
	base := startSim(t, "resendsim")
	send := func() string {
		req, _ := http.NewRequest("POST", base+"/emails", strings.NewReader(`{"from":"a@example.com","to":["b@example.org"],"subject":"hi","text":"hello"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+resendsim.DefaultAPIKey)
		req.Header.Set("Idempotency-Key", "standalone-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != http.StatusOK || body.ID == "" {
			t.Fatalf("send = %d %+v, want 200 with an id", resp.StatusCode, body)
		}
		return body.ID
	}
	if a, b := send(), send(); a != b {
		t.Fatalf("replay under one Idempotency-Key gave %s then %s", a, b)
	}
}
