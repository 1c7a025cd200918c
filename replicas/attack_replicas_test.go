package replicas_test

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake/internal/kbtest"
)

// deafProxy forwards TCP connections to a PostgreSQL server and drops every
// NotificationResponse ('A') the server sends, passing everything else: a
// LISTEN connection that stays up and answers queries but never hears a
// NOTIFY. That is what a pooler in transaction mode does to LISTEN (the
// notification goes to whichever server connection ran it), and what a
// half-open connection looks like until TCP keepalive notices it (minutes).
// The DSN must have sslmode=disable, so the stream is plain messages.
type deafProxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	dropped int
}

func newDeafProxy(tb testing.TB, target string) *deafProxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &deafProxy{ln: ln, target: target}
	tb.Cleanup(func() { ln.Close() })
	go p.serve()
	return p
}

func (p *deafProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *deafProxy) pipe(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		io.Copy(server, client)
		server.Close()
	}()
	r := bufio.NewReader(server)
	hdr := make([]byte, 5)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if hdr[0] == 'A' {
			p.mu.Lock()
			p.dropped++
			p.mu.Unlock()
			continue
		}
		if _, err := client.Write(append(hdr, body...)); err != nil {
			return
		}
	}
}

// Dropped is how many notifications the proxy swallowed.
func (p *deafProxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// viaProxy returns dsn with its host replaced by the proxy's address.
func viaProxy(tb testing.TB, dsn string, p *deafProxy) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// A replica whose key watcher hears no NOTIFY kept serving a revoked key
// from its key cache for as long as the process lived: its reads, free
// writes and, on a key with allow_unpriced, unpriced writes (money no cap
// counts, so revocation is the only brake on them). Replica A revokes the
// key; replica B, whose LISTEN connection is deaf, forwarded a $500
// customer credit (customers.create with balance) an hour later. A cached
// key is now read again once it is older than the cache's bound, whatever
// the watcher hears, so the revocation holds on B after at most that long.
func TestAttackReplicas_StaleKeyCacheWithoutNotify(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	deaf := newDeafProxy(t, u.Host)
	sim := MustSim(t)
	a := MustReplica(t, dsn, sim)
	clock := kbtest.NewClock(time.Now())
	b := mustReplicaWith(t, viaProxy(t, dsn, deaf), sim, func(s *Replica) { s.Now = clock.Now })
	auth := map[string]string{"Authorization": ""}
	keyID, secret := MustCreateKey(t, a.URL(), `{"label":"unpriced","total_usd_cap":10,"allow_unpriced":true,"allowed_endpoints":["*"]}`)
	auth["Authorization"] = "Bearer " + secret
	// B authenticates the key, and caches it.
	if status, body := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", auth); status != http.StatusOK {
		t.Fatalf("own key on B: %d %s", status, body)
	}
	if status, body := Admin(t, a.URL(), "POST", "/vault/keys/"+keyID+"/revoke", ""); status != http.StatusOK {
		t.Fatalf("revoke on A: %d %s", status, body)
	}
	kbtest.Eventually(t, "B's watcher to receive (and lose) the revocation's NOTIFY", func() bool { return deaf.Dropped() > 0 })
	clock.Advance(time.Hour)
	status, body := Do(t, "POST", b.URL()+"/v1/customers", "balance=-50000", map[string]string{
		"Authorization": auth["Authorization"], "Content-Type": "application/x-www-form-urlencoded"})
	if status != http.StatusUnauthorized {
		// Anything but keybrake's 401 is the simulator's answer: forwarded.
		t.Fatalf("an hour after the revocation on A, B forwarded a $500 customer credit for the revoked key: %d %s; want 401", status, body)
	}
}

// An operator narrows a key through replica A (an endpoint taken away,
// allow_unpriced taken away, the secret rotated with no grace) while the key
// holder keeps sending money-moving requests through replica B, which
// cached the key before the change and whose watcher hears no NOTIFY (or
// has not heard it yet: delivery is asynchronous). Reserve re-reads the
// key's caps, revocation, expiry and suspension under its lock, but not
// its allowlist, scope or secret: B decided those from the cached key and
// forwarded a $50.00 charge the new policy refuses (an endpoint no longer
// allowed, a secret rotated out), or a $500 top-up after
// allow_unpriced was taken away, for up to
// KeyCacheMaxAge with a lost NOTIFY; and it minted, for the rotated-out
// secret, a child key with $500 of the parent's cap and a secret of its
// own, which outlives the rotation. A request that reserves money (or
// moves it uncounted), and a mint, are now decided on the key as the
// store has it.
func TestAttackReplicas_NarrowedPolicyOnStaleReplica(t *testing.T) {
	dsn := MustDatabase(t, MustServerDSN(t))
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	deaf := newDeafProxy(t, u.Host)
	sim := MustSim(t)
	a := MustReplica(t, dsn, sim)
	// B's clock stands still: its cached key never ages past
	// KeyCacheMaxAge, as on a replica answering within the bound.
	clock := kbtest.NewClock(time.Now())
	b := mustReplicaWith(t, viaProxy(t, dsn, deaf), sim, func(s *Replica) { s.Now = clock.Now })

	for _, tc := range []struct {
		name, key, change, path, body string
		want                          int // keybrake's refusal; anything else is the simulator's answer
	}{
		{"EndpointTakenAway", `{"label":"narrowed","daily_usd_cap":1000,"allowed_endpoints":["charges.create","refunds.create"]}`,
			"PATCH /vault/keys/{id} {\"allowed_endpoints\":[\"refunds.create\"]}", "/v1/charges", "amount=5000&currency=usd&source=tok_visa", http.StatusForbidden},
		{"UnpricedTakenAway", `{"label":"narrowed","daily_usd_cap":1000,"allow_unpriced":true,"allowed_endpoints":["*"]}`,
			"PATCH /vault/keys/{id} {\"allow_unpriced\":false}", "/v1/topups", "amount=50000&currency=usd", http.StatusForbidden},
		{"SecretRotatedOut", `{"label":"narrowed","daily_usd_cap":1000}`,
			"POST /vault/keys/{id}/rotate ", "/v1/charges", "amount=5000&currency=usd&source=tok_visa", http.StatusUnauthorized},
		// The mint route is the admin API's: its refusal is keybrake's own
		// 401, and a 201 is a child key, with a secret of its own that the
		// rotation never reaches, minted for the rotated-out secret.
		{"SecretRotatedOutMintsChild", `{"label":"narrowed","total_usd_cap":1000,"mint":true}`,
			"POST /vault/keys/{id}/rotate ", "/vault/keys/self/children", `{"label":"kept","total_usd_cap":500}`, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keyID, secret := MustCreateKey(t, a.URL(), tc.key)
			auth := map[string]string{"Authorization": "Bearer " + secret}
			if status, body := Do(t, "GET", b.URL()+"/v1/keybrake/key", "", auth); status != http.StatusOK {
				t.Fatalf("own key on B: %d %s", status, body)
			}
			dropped := deaf.Dropped()
			method, rest, _ := strings.Cut(tc.change, " ")
			path, body, _ := strings.Cut(rest, " ")
			if status, out := Admin(t, a.URL(), method, strings.ReplaceAll(path, "{id}", keyID), body); status != http.StatusOK {
				t.Fatalf("%s on A: %d %s", tc.change, status, out)
			}
			kbtest.Eventually(t, "B's watcher to lose the change's NOTIFY", func() bool { return deaf.Dropped() > dropped })
			h := map[string]string{"Authorization": auth["Authorization"], "Idempotency-Key": "narrowed-" + tc.name}
			status, out := Do(t, "POST", b.URL()+tc.path, tc.body, h)
			if status != tc.want {
				t.Fatalf("after %s committed on A, B forwarded %s %s for the key: %d %s; want keybrake's %d", tc.change, tc.path, tc.body, status, out, tc.want)
			}
		})
	}
}
