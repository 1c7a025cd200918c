package http

import (
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/keybrake/keybrake/stripe"
)

// MCPToolClass is what the tests need of an MCP tool: its declared class
// and the Stripe request a call with args stands for.
type MCPToolClass struct {
	Name     string
	Declared stripe.Class
	Method   string
	Path     string
	Body     string
	Err      error
}

// MCPToolRequests builds each MCP tool's request from args[name].
func MCPToolRequests(args map[string]string) []MCPToolClass {
	var out []MCPToolClass
	for _, t := range mcpTools {
		c := MCPToolClass{Name: t.name, Declared: t.class}
		a, err := t.parseArgs(json.RawMessage(args[t.name]))
		if err == nil {
			var f map[string][]string
			c.Method, c.Path, f, err = t.request(a)
			c.Body = encode(f)
		}
		c.Err = err
		out = append(out, c)
	}
	return out
}

func encode(f map[string][]string) string {
	v := make(url.Values, len(f))
	for k, x := range f {
		v[k] = x
	}
	return v.Encode()
}

// MCPSessionOpen reports whether the MCP server of s has the session open.
func MCPSessionOpen(s *Server, sid string) bool {
	s.mcp.mu.Lock()
	servers := make([]*mcpKeyServer, 0, len(s.mcp.byKey))
	for _, ks := range s.mcp.byKey {
		servers = append(servers, ks)
	}
	s.mcp.mu.Unlock()
	for _, ks := range servers {
		for ss := range ks.server.Sessions() {
			if ss.ID() == sid {
				return true
			}
		}
	}
	return false
}

// SetAdminMiddleware wraps every request under /vault/ in m, for the
// OpenAPI validator (openapi_test.go). Call it before Open.
func SetAdminMiddleware(s *Server, m func(http.Handler) http.Handler) { s.adminMiddleware = m }
