package jetstream

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Receiver is one copy of a subject's messages: a plain subscription (one
// connection's), or a queue group (one member gets each message).
type Receiver struct {
	Subject string   // the subscription's subject, maybe with wildcards
	Queue   string   // the queue group; "" for a plain subscription
	Conns   []string // the connections: "name (cid N, ip:port)"
}

// FanOutError reports a billing subject that several receivers get a copy
// of: every worker among them charges every event, and only the ledger
// stands between them and a second charge.
type FanOutError struct {
	Subject   string
	Receivers []Receiver
}

// Error implements error.
func (e *FanOutError) Error() string {
	parts := make([]string, len(e.Receivers))
	for i, r := range e.Receivers {
		if r.Queue == "" {
			parts[i] = fmt.Sprintf("plain subscription %q by %s", r.Subject, strings.Join(r.Conns, ", "))
		} else {
			parts[i] = fmt.Sprintf("queue group %q on %q (%s)", r.Queue, r.Subject, strings.Join(r.Conns, ", "))
		}
	}
	return fmt.Sprintf("billing subject %q is delivered to %d receivers, so each event is processed %d times: %s; subscribe every billing worker in one queue group",
		e.Subject, len(e.Receivers), len(e.Receivers), strings.Join(parts, "; "))
}

// connz is the part of the server's /connz?subs=detail answer CheckFanOut
// reads.
type connz struct {
	Total       int `json:"total"`
	Connections []struct {
		Cid     uint64 `json:"cid"`
		Name    string `json:"name"`
		IP      string `json:"ip"`
		Port    int    `json:"port"`
		Account string `json:"account"`
		Subs    []struct {
			Subject string `json:"subject"`
			Queue   string `json:"qgroup"`
			Sid     string `json:"sid"`
		} `json:"subscriptions_list_detail"`
	} `json:"connections"`
}

// CheckFanOut asks a NATS server's HTTP monitoring endpoint (monitorURL,
// e.g. http://127.0.0.1:8222) which client connections subscribe to
// subject, through /connz?subs=detail, and returns a *FanOutError when more
// than one receiver gets each message: two plain subscriptions, a plain
// subscription beside a queue group, or two queue groups. Subscriptions with
// wildcards that match subject count. A server's monitoring lists only its
// own clients: in a cluster, check every server. client may be nil.
func CheckFanOut(ctx context.Context, client *http.Client, monitorURL, subject string) error {
	if client == nil {
		client = http.DefaultClient
	}
	recv := map[string]*Receiver{} // by queue group, or by "plain\x00cid\x00sid"
	const page = 1024
	for offset := 0; ; offset += page {
		var cz connz
		if err := getJSON(ctx, client, connzURL(monitorURL, offset, page), &cz); err != nil {
			return err
		}
		for _, c := range cz.Connections {
			conn := fmt.Sprintf("%s (cid %d, %s:%d)", c.Name, c.Cid, c.IP, c.Port)
			if c.Name == "" {
				conn = fmt.Sprintf("cid %d (%s:%d)", c.Cid, c.IP, c.Port)
			}
			for _, s := range c.Subs {
				if !subjectMatches(s.Subject, subject) {
					continue
				}
				id := "queue\x00" + c.Account + "\x00" + s.Queue
				if s.Queue == "" {
					id = fmt.Sprintf("plain\x00%d\x00%s", c.Cid, s.Sid)
				}
				r := recv[id]
				if r == nil {
					r = &Receiver{Subject: s.Subject, Queue: s.Queue}
					recv[id] = r
				}
				if !slices.Contains(r.Conns, conn) {
					r.Conns = append(r.Conns, conn)
				}
			}
		}
		if len(cz.Connections) < page || offset+page >= cz.Total {
			break
		}
	}
	if len(recv) <= 1 {
		return nil
	}
	e := &FanOutError{Subject: subject}
	for _, r := range recv {
		e.Receivers = append(e.Receivers, *r)
	}
	slices.SortFunc(e.Receivers, func(a, b Receiver) int {
		return strings.Compare(a.Queue+"\x00"+strings.Join(a.Conns, ","), b.Queue+"\x00"+strings.Join(b.Conns, ","))
	})
	return e
}

func connzURL(base string, offset, limit int) string {
	q := url.Values{"subs": {"detail"}, "offset": {strconv.Itoa(offset)}, "limit": {strconv.Itoa(limit)}}
	return strings.TrimSuffix(base, "/") + "/connz?" + q.Encode()
}

func getJSON(ctx context.Context, client *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("nats monitoring %s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("nats monitoring: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats monitoring %s: status %d", u, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("nats monitoring %s: %w", u, err)
	}
	return nil
}
