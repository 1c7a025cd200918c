package http_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	khttp "github.com/keybrake/keybrake/http"
)

// MustCert writes a self-signed certificate for 127.0.0.1 with the serial
// given to certFile and keyFile, and returns it.
func MustCert(tb testing.TB, certFile, keyFile string, serial int64) *x509.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "keybrake test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{{127, 0, 0, 1}}, BasicConstraintsValid: true, IsCA: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	// Written to temporary names and renamed, as a renewal tool does, so a
	// handshake never reads half a file.
	for _, f := range []struct {
		path string
		typ  string
		der  []byte
	}{{keyFile, "EC PRIVATE KEY", kder}, {certFile, "CERTIFICATE", der}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(tmp, f.path); err != nil {
			tb.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return cert
}

func servedSerial(tb testing.TB, url string) int64 {
	tb.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(url + "/healthz")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
}

func TestListener_TLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := MustCert(t, certFile, keyFile, 1)
	e := MustOpen(t, func(s *khttp.Server) { s.TLSCertFile, s.TLSKeyFile = certFile, keyFile })
	if !strings.HasPrefix(e.Server.URL(), "https://") {
		t.Fatalf("URL = %s, want https", e.Server.URL())
	}
	t.Run("OK", func(t *testing.T) {
		pool := x509.NewCertPool()
		pool.AddCert(first)
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get(e.Server.URL() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("readyz over TLS: %d", resp.StatusCode)
		}
	})
	t.Run("ErrPlainHTTPRefused", func(t *testing.T) {
		resp, err := http.Get(strings.Replace(e.Server.URL(), "https://", "http://", 1) + "/healthz")
		if err == nil {
			defer resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatal("plain HTTP was served on the TLS listener")
			}
		}
	})
	t.Run("ErrOldTLS", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}}}
		if resp, err := c.Get(e.Server.URL() + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatal("TLS 1.1 was accepted")
		}
	})
	t.Run("Reload", func(t *testing.T) {
		MustCert(t, certFile, keyFile, 2)
		deadline := time.Now().Add(10 * time.Second)
		for servedSerial(t, e.Server.URL()) != 2 {
			if time.Now().After(deadline) {
				t.Fatal("the renewed certificate was not served within 10s")
			}
			time.Sleep(50 * time.Millisecond) // polling the served certificate, not synchronising
		}
	})
	t.Run("ErrBrokenRenewalKeepsOld", func(t *testing.T) {
		if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if got := servedSerial(t, e.Server.URL()); got != 2 {
				t.Fatalf("serial %d served after a broken renewal, want 2", got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

func TestListener_AdminAddr(t *testing.T) {
	e := MustOpen(t, func(s *khttp.Server) { s.AdminAddr = "127.0.0.1:0" })
	admin := e.Server.AdminURL()
	if admin == e.Server.URL() {
		t.Fatal("no admin listener")
	}
	get := func(url string, auth bool) int {
		req, _ := http.NewRequest("GET", url, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+adminToken)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		name string
		url  string
		auth bool
		want int
	}{
		{"ProxyHasNoAdmin", e.Server.URL() + "/vault/keys", true, 404},
		{"ProxyHasNoMetrics", e.Server.URL() + "/metrics", true, 404},
		{"ProxyHealthz", e.Server.URL() + "/healthz", false, 200},
		{"ProxyReadyz", e.Server.URL() + "/readyz", false, 200},
		{"AdminKeys", admin + "/vault/keys", true, 200},
		{"AdminKeysNeedToken", admin + "/vault/keys", false, 401},
		{"AdminMetricsOpen", admin + "/metrics", false, 200},
		{"AdminHasNoProxy", admin + "/v1/charges", false, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(tc.url, tc.auth); got != tc.want {
				t.Fatalf("GET %s: %d, want %d", tc.url, got, tc.want)
			}
		})
	}
	t.Run("MetricsOnProxy", func(t *testing.T) {
		e := MustOpen(t, func(s *khttp.Server) { s.AdminAddr, s.MetricsOnProxy = "127.0.0.1:0", true })
		if got := get(e.Server.URL()+"/metrics", false); got != 200 {
			t.Fatalf("/metrics on the proxy with MetricsOnProxy: %d", got)
		}
	})
	t.Run("SharedListenerMetricsNeedToken", func(t *testing.T) {
		e := MustOpen(t)
		if got := get(e.Server.URL()+"/metrics", false); got != 401 {
			t.Fatalf("/metrics without a token on the shared listener: %d, want 401", got)
		}
	})
}

type stripeErr struct {
	Error struct{ Type, Code, Message string } `json:"error"`
}

func TestListener_AuthLimit(t *testing.T) {
	limit := func(s *khttp.Server) { s.AuthFailures = khttp.AuthLimit{Burst: 3, Every: time.Hour} }
	bad := map[string]string{"Authorization": "Bearer vault_key_wrongwrongwrongwrongwrong"}
	t.Run("ErrLockedOut", func(t *testing.T) {
		e := MustOpen(t, limit)
		_, good := e.CreateKey(t, `{"daily_usd_cap":10}`)
		for i := 0; i < 3; i++ {
			if resp, _ := e.Do(t, "GET", "/v1/charges", "", bad); resp.StatusCode != 401 {
				t.Fatalf("failure %d: %d, want 401", i, resp.StatusCode)
			}
		}
		resp, body := e.Do(t, "GET", "/v1/charges", "", bad)
		var se stripeErr
		_ = json.Unmarshal(body, &se)
		if resp.StatusCode != 429 || se.Error.Code != "rate_limit" || se.Error.Type != "invalid_request_error" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("4th failure: %d %s %v", resp.StatusCode, body, resp.Header)
		}
		// A correct key from the same address is refused too: a guess
		// that works must look like one that does not.
		if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": "Bearer " + good}); resp.StatusCode != 429 {
			t.Fatalf("good key while locked out: %d, want 429", resp.StatusCode)
		}
		// X-Forwarded-For from an untrusted peer is ignored.
		spoof := map[string]string{"Authorization": bad["Authorization"], "X-Forwarded-For": "203.0.113.9"}
		if resp, _ := e.Do(t, "GET", "/v1/charges", "", spoof); resp.StatusCode != 429 {
			t.Fatalf("spoofed X-Forwarded-For: %d, want 429", resp.StatusCode)
		}
		// The admin API shares the address's bucket.
		if resp, _ := e.Admin(t, "GET", "/vault/keys", ""); resp.StatusCode != 429 {
			t.Fatalf("admin while locked out: %d, want 429", resp.StatusCode)
		}
	})
	t.Run("AuditedAdminFailures", func(t *testing.T) {
		e := MustOpen(t, limit)
		e.Do(t, "GET", "/vault/keys", "", map[string]string{"Authorization": "Bearer nope"})
		_, body := e.Admin(t, "GET", "/vault/audit", "")
		if !strings.Contains(string(body), `"auth.failed"`) || !strings.Contains(string(body), `"127.0.0.1"`) {
			t.Fatalf("audit: %s", body)
		}
		e.Do(t, "GET", "/v1/charges", "", bad)
		e.Server.FlushAudit()
		_, body = e.Admin(t, "GET", "/vault/events?limit=5", "")
		_ = body // events without a key are in the store; checked below
	})
	t.Run("TrustedProxy", func(t *testing.T) {
		e := MustOpen(t, limit, func(s *khttp.Server) { s.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
		for i := 0; i < 3; i++ {
			e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": bad["Authorization"], "X-Forwarded-For": "203.0.113.9"})
		}
		if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": bad["Authorization"], "X-Forwarded-For": "203.0.113.9"}); resp.StatusCode != 429 {
			t.Fatalf("client behind the proxy not limited: %d", resp.StatusCode)
		}
		// Another client behind the same proxy has its own bucket; a client
		// prepending a fake hop does not escape (the right-most untrusted
		// hop counts).
		if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": bad["Authorization"], "X-Forwarded-For": "198.51.100.7"}); resp.StatusCode != 401 {
			t.Fatalf("other client: %d, want 401", resp.StatusCode)
		}
		if resp, _ := e.Do(t, "GET", "/v1/charges", "", map[string]string{"Authorization": bad["Authorization"], "X-Forwarded-For": "198.51.100.99, 203.0.113.9"}); resp.StatusCode != 429 {
			t.Fatalf("prepended hop escaped the limit: %d", resp.StatusCode)
		}
	})
}

func TestListener_Probes(t *testing.T) {
	e := MustOpen(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(e.Server.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", p, resp.StatusCode, b)
		}
	}
	e.Store.Close()
	resp, err := http.Get(e.Server.URL() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("readyz with the store closed: %d, want 503", resp.StatusCode)
	}
	resp, err = http.Get(e.Server.URL() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz with the store closed: %d, want 200 (alive)", resp.StatusCode)
	}
}
