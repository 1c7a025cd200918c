package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	khttp "github.com/keybrake/keybrake/http"
)

// The admin API's description (http/openapi.json) is checked three ways:
// it is a valid OpenAPI 3.1 document; every admin request and answer of
// this package's tests passes through ValidateAdmin (MustOpen installs it);
// and TestOpenAPI_Routes walks every route the admin router serves.

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// MustSpec loads and validates the description once.
func MustSpec(tb testing.TB) (*openapi3.T, routers.Router) {
	tb.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		if specDoc, specErr = loader.LoadFromData(khttp.OpenAPI()); specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		// Tests listen on 127.0.0.1:0; match paths on any host.
		specDoc.Servers = nil
		specRouter, specErr = gorillamux.NewRouter(specDoc)
	})
	if specErr != nil {
		tb.Fatalf("http/openapi.json: %v", specErr)
	}
	return specDoc, specRouter
}

// ValidateAdmin returns a middleware that validates every admin request and
// answer against the description and reports each mismatch with tb.Errorf
// when the test ends:
//   - an answer that the description does not allow (status, header, body);
//   - a 2xx answer to a request the description refuses (an undocumented
//     route, method, field, type or query parameter the server accepted).
//
// A request the description refuses may be refused by the server too: the
// suites send bad input on purpose, and the answer must then be a
// documented error.
func ValidateAdmin(tb testing.TB) func(http.Handler) http.Handler {
	_, router := MustSpec(tb)
	var mu sync.Mutex
	var problems []string
	tb.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			tb.Errorf("OpenAPI drift: %s", p)
		}
	})
	report := func(format string, args ...any) {
		mu.Lock()
		problems = append(problems, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())

			what := r.Method + " " + r.URL.RequestURI()
			vr := r.Clone(context.Background())
			vr.Body = io.NopCloser(bytes.NewReader(body))
			problem := checkExchange(router, vr, rec)
			if problem != "" {
				report("%s → %d: %s\n%s", what, rec.Code, problem, rec.Body.String())
			}
		})
	}
}

func init() {
	// The signed approval links answer HTML pages (docs/approvals.md).
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
}

// checkExchange returns what is wrong with one admin exchange, "" if nothing.
func checkExchange(router routers.Router, r *http.Request, rec *httptest.ResponseRecorder) string {
	ok := rec.Code >= 200 && rec.Code < 300
	route, params, err := router.FindRoute(r)
	if err != nil {
		if ok {
			return "served, but not in the description: " + err.Error()
		}
		// An undocumented route must be refused in the error shape; any
		// documented operation's 404 says what that shape is.
		return checkErrorShape(rec)
	}
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: opts}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && ok {
		return "the server accepted a request the description refuses: " + err.Error()
	}
	if name := undocumentedQuery(route, r); name != "" && ok {
		return "the server accepted the undocumented query parameter " + name
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 rec.Code,
		Header:                 rec.Header(),
		Body:                   io.NopCloser(bytes.NewReader(rec.Body.Bytes())),
		Options:                opts,
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return "the answer does not match the description: " + err.Error()
	}
	return ""
}

// checkErrorShape validates an answer to an undocumented route against the
// description's Error schema and status list.
func checkErrorShape(rec *httptest.ResponseRecorder) string {
	switch rec.Code {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusTooManyRequests:
	default:
		return fmt.Sprintf("an undocumented route answered %d", rec.Code)
	}
	schema := specDoc.Components.Schemas["Error"].Value
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		return "an undocumented route answered no JSON: " + err.Error()
	}
	if err := schema.VisitJSON(v); err != nil {
		return "an undocumented route answered outside the error shape: " + err.Error()
	}
	return ""
}

// undocumentedQuery returns the first query parameter of r the operation
// does not declare ("metadata[k]" counts as the deepObject metadata).
func undocumentedQuery(route *routers.Route, r *http.Request) string {
	declared := map[string]bool{}
	for _, p := range route.Operation.Parameters {
		if p.Value.In == "query" {
			declared[p.Value.Name] = true
		}
	}
	for name := range r.URL.Query() {
		base := name
		if i := strings.IndexByte(name, '['); i > 0 {
			base = name[:i]
		}
		if !declared[base] {
			return name
		}
	}
	return ""
}
