package http

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpOrigin marks a request the MCP server made for a tool call, so its
// audit event records the session and the client. Only the MCP server puts
// it in a request's context; nothing a client sends can.
type mcpOrigin struct {
	session string
	client  string
}

type mcpOriginKey struct{}

// originOf returns the MCP origin of a request, if it has one.
func originOf(ctx context.Context) (mcpOrigin, bool) {
	o, ok := ctx.Value(mcpOriginKey{}).(mcpOrigin)
	return o, ok
}

// toolHandler runs a call of t: it checks the arguments (a protocol error
// if they are wrong, and nothing else happens), builds the Stripe request
// the call stands for, runs it through the proxy's request path as if a
// client had sent it with the same vault key, and turns the answer into
// the tool's result.
func (m *mcpServer) toolHandler(t *mcpTool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args, err := t.parseArgs(req.Params.Arguments)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: t.name + ": " + err.Error()}
		}
		method, path, form, err := t.request(args)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: t.name + ": " + err.Error()}
		}
		idem, _ := args["idempotency_key"].(string)
		return m.run(ctx, req, t.name, method, path, form.Encode(), idem)
	}
}

// budgetHandler answers keybrake_budget through the proxy's own-key
// endpoint, GET /v1/keybrake/key.
func (m *mcpServer) budgetHandler(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if _, err := (&mcpTool{name: mcpBudgetTool}).parseArgs(req.Params.Arguments); err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: mcpBudgetTool + ": " + err.Error()}
	}
	return m.run(ctx, req, mcpBudgetTool, http.MethodGet, stripe.KeybrakePath, "", "")
}

// run sends one Stripe request through the proxy in process and returns
// the tool result. The request carries the vault key of the HTTP request
// that carried the call (the wrapper checked it owns the session), and on
// POST an Idempotency-Key (mcpIdempotencyKey).
func (m *mcpServer) run(ctx context.Context, req *mcp.CallToolRequest, tool, method, path, encoded, idem string) (*mcp.CallToolResult, error) {
	var h http.Header
	if req.Extra != nil {
		h = req.Extra.Header
	}
	origin := mcpOrigin{session: req.Session.ID(), client: clientName(req.Session.InitializeParams())}
	ctx = context.WithValue(ctx, mcpOriginKey{}, origin)
	target := "http://keybrake.mcp" + path
	var body *strings.Reader
	if method == http.MethodPost {
		body = strings.NewReader(encoded)
	} else {
		if encoded != "" {
			target += "?" + encoded
		}
		body = strings.NewReader("")
	}
	r, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "could not build the request"}
	}
	r.Header.Set("Authorization", h.Get("Authorization"))
	r.Header.Set("User-Agent", "keybrake-mcp ("+truncate(origin.client, 100)+")")
	if method == http.MethodPost {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		key, err := m.s.proxy.authenticate(r, m.s.stripeRoute())
		if key != nil {
			if k := mcpIdempotencyKey(key.ID, idem, origin.session, h.Get(mcpRPCIDHeader)); k != "" {
				r.Header.Set("Idempotency-Key", k)
			}
		} else if err == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no vault key"}
		}
	}
	rec := newRecorder()
	m.s.proxy.serve(rec, r, m.s.stripeRoute(), path)
	if rec.status == http.StatusUnauthorized {
		m.end(origin.session)
	}
	return m.result(ctx, r, tool, idem, rec), nil
}

// mcpIdempotencyKey decides the Idempotency-Key of a tool call:
//
//   - with an idempotency_key argument, a hash of the vault key's ID and
//     that name: the agent's retry replays the first call in any session of
//     the key for 23 hours, and two keys sharing a Stripe account never
//     meet upstream;
//   - else, with a session, a hash of the key, the session ID and the
//     JSON-RPC id: the same message sent again (a client's transport retry)
//     replays, while every new call has a new id and acts anew;
//   - else "" (the proxy makes a random one).
func mcpIdempotencyKey(keyID, idem, session, rpcID string) string {
	var src string
	switch {
	case idem != "":
		src = "arg\x00" + keyID + "\x00" + idem
	case session != "" && rpcID != "":
		src = "rpc\x00" + keyID + "\x00" + session + "\x00" + rpcID
	default:
		return ""
	}
	sum := sha256.Sum256([]byte(src))
	return "kbmcp_" + hex.EncodeToString(sum[:20])
}

// clientName is the client's name and version from its initialize request.
func clientName(p *mcp.InitializeParams) string {
	if p == nil || p.ClientInfo == nil {
		return ""
	}
	name := strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
	return truncate(strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, name), 200)
}

// result turns the proxy's answer into a tool result: Stripe's object as
// JSON text and structured content, or a tool error (isError) whose text
// says what was refused or failed, why, what remains and when it resets.
func (m *mcpServer) result(ctx context.Context, r *http.Request, tool, idem string, rec *recorder) *mcp.CallToolResult {
	var v any
	_ = json.Unmarshal(rec.body.Bytes(), &v)
	if rec.status >= 200 && rec.status < 300 {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: rec.body.String()}}, StructuredContent: v}
	}
	var e struct {
		Error struct {
			Type        string `json:"type"`
			Code        string `json:"code"`
			DeclineCode string `json:"decline_code"`
			Message     string `json:"message"`
			Param       string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(rec.body.Bytes(), &e)
	var text strings.Builder
	ours := strings.HasPrefix(e.Error.Code, "keybrake_") || rec.header.Get("Request-Id") == ""
	switch {
	case rec.status == http.StatusBadGateway || rec.status == http.StatusServiceUnavailable:
		fmt.Fprintf(&text, "%s failed (%d %s): %s", tool, rec.status, e.Error.Code, e.Error.Message)
		text.WriteString(" Call again with the same idempotency_key to retry safely; without one, check list tools first, since it may have acted.")
	case ours:
		fmt.Fprintf(&text, "keybrake refused %s (%s): %s", tool, refusalKind(rec.status, e.Error.Code), e.Error.Message)
	default:
		fmt.Fprintf(&text, "Stripe refused %s (%d %s/%s", tool, rec.status, e.Error.Type, e.Error.Code)
		if e.Error.DeclineCode != "" {
			fmt.Fprintf(&text, "/%s", e.Error.DeclineCode)
		}
		fmt.Fprintf(&text, "): %s", e.Error.Message)
		if e.Error.Param != "" {
			fmt.Fprintf(&text, " (parameter %s)", e.Error.Param)
		}
		text.WriteString(" Nothing was counted against the vault key.")
	}
	structured := map[string]any{"status": rec.status, "error": v}
	if key, _ := m.s.proxy.authenticate(r, m.s.stripeRoute()); key != nil && rec.status != http.StatusUnauthorized {
		if b, err := m.s.budget(ctx, key, m.s.Now()); err == nil {
			text.WriteString("\n" + remainingText(b))
			structured["budget"] = b
		}
	}
	approval := e.Error.Code == "keybrake_"+keybrake.EAPPROVAL
	switch {
	case approval && idem != "":
		// The approval is matched by the Idempotency-Key, which is the
		// idempotency_key argument's: the same call again is what uses it.
		fmt.Fprintf(&text, "\nA person must approve this call first. Once they have, call %s again with the same arguments and the same idempotency_key (%q); until then, and if it is denied, do not retry it.", tool, idem)
	case approval:
		// Without the argument the key is derived from this JSON-RPC
		// message, and no later call can present it.
		fmt.Fprintf(&text, "\nA person must approve this call first, and this call had no idempotency_key, so no later call can use an approval of it: call %s again once with an idempotency_key to ask for an approval, and after a person approves it, again with the same arguments and idempotency_key.", tool)
	case rec.status == http.StatusUnauthorized:
		text.WriteString("\nThis vault key can no longer be used, here or anywhere: stop, and ask a person for a new vault key.")
	case ours && rec.status != http.StatusBadGateway && rec.status != http.StatusServiceUnavailable:
		text.WriteString("\nDo not retry this call as it is: stop, or ask a person to raise the limit.")
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text.String()}}, StructuredContent: structured, IsError: true}
	return res
}

// refusalKind names a keybrake refusal for a model.
func refusalKind(status int, code string) string {
	switch {
	case code == "keybrake_spend_cap_exceeded":
		return "spend cap"
	case code == "keybrake_"+keybrake.EAPPROVAL:
		return "waiting for a person's approval"
	case status == http.StatusUnauthorized:
		return "vault key not usable"
	case status == http.StatusForbidden:
		return "not allowed by the vault key's policy"
	case status == http.StatusBadRequest:
		return "invalid request"
	}
	return code
}

// remainingText states what remains in every capped window and when it
// resets.
func remainingText(b *budget) string {
	var parts []string
	add := func(name string, w *windowBudget, reset bool) {
		if w == nil || w.Cap == nil {
			return
		}
		s := fmt.Sprintf("%s: $%s of $%s remain ($%s spent", name, w.Remaining, w.Cap, w.Spent)
		if reset && w.ResetsAt != nil {
			s += ", resets " + w.ResetsAt.Format(time.RFC3339)
		}
		parts = append(parts, s+")")
	}
	add("today", b.Daily, true)
	add("this month", b.Monthly, true)
	add("in total", b.Total, false)
	if b.PerRequest != nil && b.PerRequest.Cap != nil {
		parts = append(parts, fmt.Sprintf("at most $%s per call", b.PerRequest.Cap))
	}
	if len(parts) == 0 {
		return "Remaining: this vault key has no spend cap; its spend is only counted."
	}
	s := "Remaining: " + strings.Join(parts, "; ") + "."
	if b.Held > 0 {
		s += fmt.Sprintf(" $%s of the spend is held on objects that can still move money.", b.Held)
	}
	if b.Uncertain > 0 {
		s += fmt.Sprintf(" $%s is uncertain (answers lost in transit) and counted until resolved.", b.Uncertain)
	}
	return s
}

// limitsText is the part of a tool's description that states the key's
// limits for it, as they stand.
func limitsText(key *keybrake.Key, class stripe.Class, b *budget) string {
	var s string
	switch class {
	case stripe.ClassPriced:
		s = "Money this tool moves counts against this vault key's caps; a call over a cap is refused and nothing is sent to Stripe. " + remainingText(b)
	case stripe.ClassUnpriced:
		s = "keybrake cannot price this call; this vault key allows it without counting it (allow_unpriced)."
	default:
		s = "Moves no money; nothing is counted against this vault key."
	}
	if len(key.AllowedCustomers) > 0 {
		s += " Limited to customers " + strings.Join(key.AllowedCustomers, ", ") + "."
	}
	if len(key.AllowedCurrencies) > 0 && class == stripe.ClassPriced {
		s += " Currencies: " + strings.Join(key.AllowedCurrencies, ", ") + "."
	}
	return s
}

// recorder is the response writer of an in-process request: it keeps the
// status, headers and body the proxy writes.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.body.Len()+len(b) > maxUpstreamBody {
		return 0, fmt.Errorf("response larger than %d bytes", maxUpstreamBody)
	}
	return r.body.Write(b)
}

// Flush is a no-op: the whole answer is read once the proxy returns.
func (r *recorder) Flush() {}
