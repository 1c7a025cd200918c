package http

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpProtocolVersions are the MCP versions keybrake speaks: the Streamable
// HTTP transport with sessions (2025-11-25, the current release, and the
// two before it). A session is bound to the vault key that opened it, its
// ID is in every audit event, and tool-list changes are announced on it.
// Clients asking for the sessionless 2026-07-28 protocol are answered that
// it is unsupported and fall back to 2025-11-25 (the Go SDK does so on its
// own).
var mcpProtocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// mcpSessionTimeout closes sessions that sent nothing for this long.
const mcpSessionTimeout = 30 * time.Minute

// mcpRPCIDHeader carries the JSON-RPC id of a tools/call from the HTTP
// wrapper to the tool handler, which sees the HTTP headers of its request
// but not the id. Any value a client sends is removed first.
const mcpRPCIDHeader = "Keybrake-Mcp-Rpc-Id"

// mcpServer serves keybrake's MCP endpoint, /mcp: Stripe tools for agents,
// authenticated by the vault key as a bearer token. Each vault key has its
// own mcp.Server whose tools are exactly what the key's policy permits;
// every session of that key runs on it, so a policy change is one tool-list
// change notified to all of them. A tool call becomes the Stripe request it
// stands for and runs through the proxy's one request path (call).
//
// A session's life:
//
//	initialize with a usable vault key --> open (bound to the key; the SDK issues its Mcp-Session-Id)
//	open --request with another key's bearer--> open (refused as an unknown session)
//	open --key's policy changes--> open (tools/list_changed sent)
//	open --tools/call after the key is revoked or expired--> ended (refused as a tool error and audited like any request of the key; nothing forwarded)
//	ended --any request--> closed (401, or 404 if the key is usable again: the client opens a new session)
//	open --any other request after the key is revoked or expired--> closed (401)
//	open --DELETE, or mcpSessionTimeout idle--> closed
type mcpServer struct {
	s       *Server
	handler *mcp.StreamableHTTPHandler

	mu       sync.Mutex
	byKey    map[string]*mcpKeyServer // by key ID
	owners   map[string]mcpOwner      // by session ID
	dead     map[string]bool          // sessions whose key's call was refused as unusable, by ID
	lastPrun time.Time
	stop     context.CancelFunc
}

// mcpKeyServer is the mcp.Server of one vault key and the tools it has.
type mcpKeyServer struct {
	keyID  string
	server *mcp.Server
	mu     sync.Mutex
	tools  map[string]bool
}

// mcpOwner is the key a session was opened with.
type mcpOwner struct {
	keyID   string
	created time.Time
}

type mcpKeyCtx struct{}

func newMCPServer(s *Server) (*mcpServer, error) {
	m := &mcpServer{s: s, byKey: map[string]*mcpKeyServer{}, owners: map[string]mcpOwner{}, dead: map[string]bool{}}
	m.handler = mcp.NewStreamableHTTPHandler(m.serverFor, &mcp.StreamableHTTPOptions{
		SessionTimeout:      mcpSessionTimeout,
		MaxRequestBodyBytes: s.MaxBodyBytes,
		Logger:              nil,
	})
	if w, ok := s.Store.(keybrake.KeyWatcher); ok {
		ctx, cancel := context.WithCancel(context.Background())
		if err := w.WatchKeys(ctx, m.keyChanged); err != nil {
			cancel()
			return nil, err
		}
		m.stop = cancel
	}
	return m, nil
}

func (m *mcpServer) close() {
	if m.stop != nil {
		m.stop()
	}
}

// ServeHTTP authenticates the vault key, checks that a session belongs to
// it, and hands the request to the SDK's Streamable HTTP handler.
func (m *mcpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(mcpRPCIDHeader)
	// The same auth limit as the REST routes (authlimit.go): /mcp is one
	// more place to try vault keys, so a locked-out address is refused
	// here too, and a failure here counts against it.
	if secs, msg, locked := m.s.authLockout(r); locked {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		writeJSON(w, http.StatusTooManyRequests, map[string]any{
			"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": -32001, "message": msg},
		})
		return
	}
	key, err := m.s.proxy.authenticate(r, m.s.stripeRoute())
	if key == nil {
		if keybrake.ErrorCode(err) == keybrake.EUNAUTHORIZED {
			m.s.authFailed(r, "vault key missing, malformed or unknown") // never the presented secret
		}
		m.unauthorized(w, err)
		return
	}
	sid := r.Header.Get("Mcp-Session-Id")
	if sid != "" {
		owner, ok := m.owner(sid)
		if ok && owner != key.ID {
			// Never reveal that another key's session exists.
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
	}
	call := false
	if r.Method == http.MethodPost {
		var ok bool
		if call, ok = m.peek(w, r); !ok {
			return
		}
	}
	if err != nil && (sid == "" || !call) {
		// A revoked or expired key opens no session and ends its
		// sessions; a tools/call still goes through the request path
		// below, so its refusal is audited on the key.
		m.unauthorized(w, err)
		m.closeSession(key.ID, sid)
		return
	}
	if sid != "" && m.ended(sid) {
		// The session's last call was refused because its key could not
		// be used; it ends on this request, whatever it is.
		m.closeSession(key.ID, sid)
		if err != nil {
			m.unauthorized(w, err)
		} else {
			http.Error(w, "session not found", http.StatusNotFound)
		}
		return
	}
	ctx := context.WithValue(r.Context(), mcpKeyCtx{}, key)
	m.handler.ServeHTTP(w, r.WithContext(ctx))
}

// end marks a session as ended: its next request closes it. A tool call
// refused because the key cannot be used ends its session, before the
// refusal is written. Closing the session at once would end the client's
// standalone SSE stream while the refusal may still be unread, and the Go
// SDK's client then fails the call instead of returning the refusal.
func (m *mcpServer) end(sid string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.owners[sid]; ok {
		m.dead[sid] = true
	}
}

// ended reports whether a session was marked as ended.
func (m *mcpServer) ended(sid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dead[sid]
}

// peek reads the body of a POST, notes the JSON-RPC id of a tools/call in
// mcpRPCIDHeader and puts the body back. It reports whether the message is
// a tools/call, and false for ok when it answered the request itself.
func (m *mcpServer) peek(w http.ResponseWriter, r *http.Request) (call, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, m.s.MaxBodyBytes+1))
	if err != nil {
		http.Error(w, "could not read the request body", http.StatusBadRequest)
		return false, false
	}
	if int64(len(body)) > m.s.MaxBodyBytes {
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return false, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	// Decode as the SDK does (jsonrpc.DecodeMessage: case-sensitive names,
	// its rule for repeated ones), so that what is taken for a tools/call
	// here is exactly what the SDK runs as one: encoding/json matches
	// "Method" to method, and a revoked key's session then listed its tools
	// as if it were calling one. A batch (2025-03-26) is not a call here.
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		return false, true
	}
	msg, err := jsonrpc.DecodeMessage(body)
	req, isReq := msg.(*jsonrpc.Request)
	if err != nil || !isReq || req.Method != "tools/call" {
		return false, true
	}
	if req.ID.IsValid() {
		if id, err := json.Marshal(req.ID.Raw()); err == nil && len(id) <= 200 {
			r.Header.Set(mcpRPCIDHeader, string(id))
		}
	}
	return true, true
}

// unauthorized answers 401 with the reason in a JSON-RPC error, and the
// WWW-Authenticate challenge of a bearer token.
func (m *mcpServer) unauthorized(w http.ResponseWriter, err error) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="keybrake", error="invalid_token"`)
	writeJSON(w, http.StatusUnauthorized, map[string]any{
		"jsonrpc": "2.0", "id": nil,
		"error": map[string]any{"code": -32001, "message": keybrake.ErrorMessage(err)},
	})
}

// serverFor returns the mcp.Server of the key that authenticated r, for
// the SDK to open a new session on.
func (m *mcpServer) serverFor(r *http.Request) *mcp.Server {
	key, _ := r.Context().Value(mcpKeyCtx{}).(*keybrake.Key)
	if key == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked()
	if ks := m.byKey[key.ID]; ks != nil {
		return ks.server
	}
	ks := &mcpKeyServer{keyID: key.ID, tools: map[string]bool{}}
	ks.server = mcp.NewServer(&mcp.Implementation{Name: "keybrake", Title: "keybrake: spend-capped Stripe tools", Version: "1"}, &mcp.ServerOptions{
		Instructions: mcpInstructions,
		GetSessionID: func() string {
			id := randomID("mcps_", 32)
			m.mu.Lock()
			m.owners[id] = mcpOwner{keyID: key.ID, created: m.s.Now()}
			m.mu.Unlock()
			return id
		},
		SupportedProtocolVersions: mcpProtocolVersions,
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	ks.server.AddReceivingMiddleware(m.describeLimits(key.ID))
	m.sync(ks, key)
	m.byKey[key.ID] = ks
	return ks.server
}

const mcpInstructions = "These are Stripe tools behind keybrake, a spend cap. Every call runs under the vault key's policy: " +
	"tools/list shows only what the key may do, each description states the key's current limits, and keybrake_budget tells " +
	"what remains and when it resets. A refused call returns an error that says what was refused, why, what remains and when " +
	"it resets; nothing was sent to Stripe. Do not retry a refusal: stop, or ask a person. To retry a call that may have " +
	"failed in transit, call again with the same idempotency_key."

// owner returns the key ID a session was opened with.
func (m *mcpServer) owner(sid string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.owners[sid]
	return o.keyID, ok
}

// pruneLocked forgets sessions the SDK has closed (DELETE, idle timeout)
// and key servers without sessions, at most once a minute.
func (m *mcpServer) pruneLocked() {
	now := m.s.Now()
	if now.Sub(m.lastPrun) < time.Minute {
		return
	}
	m.lastPrun = now
	live := map[string]bool{}
	for id, ks := range m.byKey {
		n := 0
		for ss := range ks.server.Sessions() {
			live[ss.ID()] = true
			n++
		}
		if n == 0 && !m.recentLocked(id, now) {
			delete(m.byKey, id)
		}
	}
	for sid, o := range m.owners {
		if !live[sid] && now.Sub(o.created) > time.Minute {
			delete(m.owners, sid)
			delete(m.dead, sid)
		}
	}
}

// recentLocked reports whether a session of the key was opened in the last
// minute, and may not be connected yet.
func (m *mcpServer) recentLocked(keyID string, now time.Time) bool {
	for _, o := range m.owners {
		if o.keyID == keyID && now.Sub(o.created) <= time.Minute {
			return true
		}
	}
	return false
}

// closeSession ends a session of the key, if it is open.
func (m *mcpServer) closeSession(keyID, sid string) {
	if sid == "" {
		return
	}
	m.mu.Lock()
	ks := m.byKey[keyID]
	delete(m.owners, sid)
	delete(m.dead, sid)
	m.mu.Unlock()
	if ks == nil {
		return
	}
	for ss := range ks.server.Sessions() {
		if ss.ID() == sid {
			ss.Close()
		}
	}
}

// keyChanged brings the tools of a changed key's sessions in line with its
// policy; the SDK announces the change to every session. A key that can no
// longer be used keeps its tools: its sessions end on their next request,
// which is audited.
func (m *mcpServer) keyChanged(keyID string) {
	m.mu.Lock()
	var servers []*mcpKeyServer
	if keyID == "" {
		for _, ks := range m.byKey {
			servers = append(servers, ks)
		}
	} else if ks := m.byKey[keyID]; ks != nil {
		servers = append(servers, ks)
	}
	m.mu.Unlock()
	for _, ks := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		key, err := m.s.Store.FindKeyByID(ctx, ks.keyID)
		cancel()
		if err != nil {
			m.s.logger().Warn("mcp: key change not applied to tools", "key_id", ks.keyID, "err", err)
			continue
		}
		if key.Usable(m.s.Now()) == nil {
			m.sync(ks, key)
		}
	}
}

// sync registers the tools the key's policy permits and removes the others.
func (m *mcpServer) sync(ks *mcpKeyServer, key *keybrake.Key) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	want := map[string]bool{mcpBudgetTool: true}
	for _, t := range mcpTools {
		if toolVisible(key, t) {
			want[t.name] = true
		}
	}
	var gone []string
	for name := range ks.tools {
		if !want[name] {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		ks.server.RemoveTools(gone...)
	}
	if want[mcpBudgetTool] && !ks.tools[mcpBudgetTool] {
		ks.server.AddTool(&mcp.Tool{Name: mcpBudgetTool, Title: "Budget of this vault key", Description: budgetToolDesc,
			InputSchema: map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, m.budgetHandler)
	}
	for _, t := range mcpTools {
		if want[t.name] && !ks.tools[t.name] {
			ks.server.AddTool(&mcp.Tool{Name: t.name, Title: t.title, Description: t.desc, InputSchema: t.schema(),
				Annotations: t.annotations()}, m.toolHandler(t))
		}
	}
	ks.tools = want
}

const budgetToolDesc = "The spend of this vault key and what remains, per window (per request, daily, monthly, total), with when each window resets, what is held on objects that can still move money, and what is uncertain."

// toolVisible reports whether the key's policy lets the tool do anything:
// its operation is on the allowlist, and keybrake can price it or the key
// allows unpriced operations.
func toolVisible(key *keybrake.Key, t *mcpTool) bool {
	if t.class == stripe.ClassUnpriced && !key.AllowUnpriced {
		return false
	}
	for _, op := range t.operations() {
		if endpointAllowed(key.AllowedEndpoints, op.Name, op.Path) {
			return true
		}
	}
	return false
}

// annotations are the hints MCP clients show before a call.
func (t *mcpTool) annotations() *mcp.ToolAnnotations {
	if t.method == http.MethodGet {
		return &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(true)}
	}
	return &mcp.ToolAnnotations{DestructiveHint: ptr(t.class != stripe.ClassWrite), IdempotentHint: false, OpenWorldHint: ptr(true)}
}

func ptr[T any](v T) *T { return &v }

// describeLimits rewrites the descriptions of tools/list with the key's
// limits as they stand, so a model reads what remains before it calls.
func (m *mcpServer) describeLimits(keyID string) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			lr, ok := res.(*mcp.ListToolsResult)
			if err != nil || method != "tools/list" || !ok {
				return res, err
			}
			key, err := m.s.Store.FindKeyByID(ctx, keyID)
			if err != nil {
				return nil, err
			}
			now := m.s.Now()
			b, err := m.s.budget(ctx, key, now)
			if err != nil {
				return nil, err
			}
			out := *lr
			out.Tools = make([]*mcp.Tool, len(lr.Tools))
			for i, t := range lr.Tools {
				c := *t
				if tt := mcpToolByName(t.Name); tt != nil {
					c.Description = tt.desc + "\n\n" + limitsText(key, tt.class, b)
				} else if t.Name == mcpBudgetTool {
					c.Description = budgetToolDesc + "\n\n" + remainingText(b)
				}
				out.Tools[i] = &c
			}
			return &out, nil
		}
	}
}
