package http

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/parser"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// Field rules are CEL expressions (github.com/google/cel-go) on the parsed
// request; every rule of a key that applies to the operation must be true.
// The variables, the same for every operation (a parameter the request does
// not send is absent: test it with has()):
//
//	operation               string  the operation's name, e.g. "charges.create"; an
//	                                operation with other names (stripe.Aliases) is
//	                                evaluated under each, and must pass under all
//	account                 string  the Stripe-Account acted on, "" for the platform
//	amount                  int     the amount parameter, in minor units
//	application_fee_amount  int
//	currency                string  lower case
//	customer, payment_method, description, statement_descriptor,
//	on_behalf_of, capture_method, confirm      string
//	metadata                map(string, string), empty when none is sent
//	transfer_data           map(string, dyn); a charge's legacy destination
//	                                (destination, destination[account] and [amount])
//	                                is bound as transfer_data, in request too
//	request                 map(string, dyn): every parameter, nested as sent
//
// has(name) with a bare name tests whether the request sent the top-level
// parameter: !has(transfer_data) is has(request.transfer_data) negated.
// Reading an absent variable is an error, and an error refuses the request
// (fail closed): write has(amount) && amount <= 5000 for an optional one.
//
// A priced operation's rules are evaluated twice: in decide on its
// parameters, and once priced (checkPricedRules) with amount and currency
// bound to what keybrake priced, which a parameter need not carry.
//
// A rule naming the operation that creates a money object
// (payment_intents.create, charges.create: stripe.MadeBy) also bounds what
// later writes set that object to move: it is evaluated, once priced, on
// a write to the object that sets its amount or currency (stripe.Raises:
// an update, an increment_authorization, a confirm with amount_to_confirm),
// that moves more than the key holds on it (an overcapture), or that acts
// on one the key holds nothing on, with amount and currency bound to the
// new total and the other variables to that request's parameters. A write
// that changes neither (metadata, a confirm or capture of what is held) is
// not checked by it.
const (
	ruleCostLimit      = 10_000 // CEL cost units per evaluation; a rule on a Stripe request costs tens
	ruleRecursionLimit = 32
	ruleSizeLimit      = 512 // CEL AST nodes per expression
)

var ruleStrings = []string{"currency", "customer", "payment_method", "description", "statement_descriptor", "on_behalf_of", "capture_method", "confirm"}

var ruleInts = []string{"amount", "application_fee_amount"}

// ruleEnv is the CEL environment every field rule compiles in.
var ruleEnv = sync.OnceValues(func() (*cel.Env, error) {
	opts := []cel.EnvOption{
		cel.Variable("operation", cel.StringType),
		cel.Variable("account", cel.StringType),
		cel.Variable("metadata", cel.MapType(cel.StringType, cel.StringType)),
		cel.Variable("transfer_data", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)),
		cel.Macros(parser.NewGlobalMacro("has", 1, hasParam)),
		cel.ParserRecursionLimit(ruleRecursionLimit),
		cel.ParserExpressionSizeLimit(2048),
	}
	for _, n := range ruleStrings {
		opts = append(opts, cel.Variable(n, cel.StringType))
	}
	for _, n := range ruleInts {
		opts = append(opts, cel.Variable(n, cel.IntType))
	}
	return cel.NewEnv(opts...)
})

// hasParam expands has(name) to has(request.name), and has(a.b) as CEL does.
func hasParam(eh parser.ExprHelper, target ast.Expr, args []ast.Expr) (ast.Expr, *common.Error) {
	if args[0].Kind() == ast.IdentKind {
		return eh.NewPresenceTest(eh.NewIdent("request"), args[0].AsIdent()), nil
	}
	return parser.MakeHas(eh, target, args)
}

// compiledRule is a field rule ready to evaluate.
type compiledRule struct {
	rule keybrake.FieldRule
	prg  cel.Program
}

// compiledRules caches compiled rule sets by their JSON, shared by every
// key with the same rules, and by the key version's guards (the key
// cache's *keybrake.Key is one version of a key: a change evicts it), so a
// request on a cached key neither compiles nor encodes its rules. Both
// are bounded like the key cache.
var compiledRules = struct {
	sync.Mutex
	m     map[string][]compiledRule
	byPtr map[*keybrake.Guards][]compiledRule
}{m: map[string][]compiledRule{}, byPtr: map[*keybrake.Guards][]compiledRule{}}

// CompileRules compiles and type-checks rules. Returns EINVALID naming the
// first bad rule (guards.rules[i].expr) with CEL's message, which gives
// the line and column.
func CompileRules(rules []keybrake.FieldRule) ([]compiledRule, error) {
	env, err := ruleEnv()
	if err != nil {
		return nil, fmt.Errorf("field rules environment: %w", err)
	}
	out := make([]compiledRule, 0, len(rules))
	for i, r := range rules {
		param := fmt.Sprintf("guards.rules[%d].expr", i)
		a, iss := env.Compile(r.Expr)
		if iss.Err() != nil {
			return nil, keybrake.ErrorParam(param, "Field rule %q does not compile: %s", r.Name, strings.TrimSpace(iss.Err().Error()))
		}
		if a.OutputType() != cel.BoolType {
			return nil, keybrake.ErrorParam(param, "Field rule %q is of type %s; a rule must be a condition (bool).", r.Name, a.OutputType())
		}
		if n := countNodes(a.NativeRep().Expr()); n > ruleSizeLimit {
			return nil, keybrake.ErrorParam(param, "Field rule %q has %d nodes; at most %d are allowed.", r.Name, n, ruleSizeLimit)
		}
		prg, err := env.Program(a, cel.CostLimit(ruleCostLimit), cel.InterruptCheckFrequency(100), cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			return nil, keybrake.ErrorParam(param, "Field rule %q: %s", r.Name, err)
		}
		out = append(out, compiledRule{rule: r, prg: prg})
	}
	return out, nil
}

func countNodes(e ast.Expr) int {
	n := 0
	v := ast.NewExprVisitor(func(ast.Expr) { n++ })
	ast.PostOrderVisit(e, v)
	return n
}

// rulesOf returns the key's compiled rules, compiling once per rule set.
func rulesOf(g *keybrake.Guards) ([]compiledRule, error) {
	compiledRules.Lock()
	rs, ok := compiledRules.byPtr[g]
	compiledRules.Unlock()
	if ok {
		return rs, nil
	}
	b, _ := json.Marshal(g.Rules)
	compiledRules.Lock()
	rs, ok = compiledRules.m[string(b)]
	compiledRules.Unlock()
	if !ok {
		var err error
		if rs, err = CompileRules(g.Rules); err != nil {
			return nil, err
		}
	}
	compiledRules.Lock()
	// Emptied apart: the key cache reads every key again after
	// KeyCacheMaxAge, so byPtr fills with a new version of each key every
	// few seconds, and emptying m with it would compile every rule set
	// again each time it does.
	if len(compiledRules.m) >= keyCacheSize {
		compiledRules.m = map[string][]compiledRule{}
	}
	if len(compiledRules.byPtr) >= keyCacheSize {
		compiledRules.byPtr = map[*keybrake.Guards][]compiledRule{}
	}
	compiledRules.m[string(b)] = rs
	compiledRules.byPtr[g] = rs
	compiledRules.Unlock()
	return rs, nil
}

// checkRules evaluates the key's field rules on the request and returns
// EFORBIDDEN naming the first that is false or cannot be evaluated.
func (v *stripeVendor) checkRules(k *keybrake.Key, sr *stripeRequest, account string) error {
	return v.evalRules(k, sr, "", func() map[string]any { return ruleVars(sr.op.Name, account, sr.form) }, "this request")
}

// checkPricedRules evaluates the key's field rules on a priced request
// again, with amount and currency bound to what keybrake priced (pr): the
// money of a full refund sent without amount, of a capture sent as
// amount_to_capture, or of an intent confirmed by lookup is in no amount
// parameter, and "!has(amount) || amount <= 5000" would let it through.
// has(amount) is true here. raises says that the request sets what its
// object moves, or makes it move more than the key holds on it: the rules
// naming the operation that creates the object apply too.
func (v *stripeVendor) checkPricedRules(k *keybrake.Key, sr *stripeRequest, account string, pr stripe.Price, raises bool) error {
	madeBy := ""
	if raises {
		madeBy = stripe.MadeBy(sr.op.Name)
	}
	return v.evalRules(k, sr, madeBy, func() map[string]any {
		vars := ruleVars(sr.op.Name, account, sr.form)
		request := map[string]any{}
		for name, val := range vars["request"].(map[string]any) { // the parameters as ruleVars binds them
			request[name] = val
		}
		request["amount"], request["currency"] = strconv.FormatInt(pr.Amount, 10), pr.Currency
		vars["request"], vars["amount"], vars["currency"] = request, pr.Amount, pr.Currency
		return vars
	}, "the amount keybrake priced, "+formatMinor(pr.Amount, pr.Currency)+" (amount "+strconv.FormatInt(pr.Amount, 10)+")")
}

// evalRules evaluates every rule of k that applies to sr, or names the
// operation madeBy ("" for none), on the variables vars returns (built
// only when a rule applies); what names them in a refusal.
func (v *stripeVendor) evalRules(k *keybrake.Key, sr *stripeRequest, madeBy string, vars func() map[string]any, what string) error {
	op, class := sr.op, sr.class
	g := k.Guards
	if g == nil || len(g.Rules) == 0 {
		return nil
	}
	rs, err := rulesOf(g)
	if err != nil {
		// Stored rules were compiled when set; one that no longer
		// compiles (an older keybrake) refuses, never passes.
		return keybrake.Errorf(keybrake.EFORBIDDEN, "keybrake refused %s: the key's field rules do not compile (%s).", op.Name, keybrake.ErrorMessage(err))
	}
	var bound map[string]any
	for _, r := range rs {
		if !appliesTo(r.rule.Operations, op.Name, class) && (madeBy == "" || !namesOperation(r.rule.Operations, madeBy)) {
			continue
		}
		if bound == nil {
			bound = vars()
		}
		// The operation under each of its names: a rule testing
		// operation == "refunds.create" must hold for the same refund
		// sent as charges.refund too (stripe.Aliases).
		for _, name := range operationNames(op.Name) {
			bound["operation"] = name
			out, _, err := r.prg.Eval(bound)
			if err == nil {
				if ok, isBool := out.Value().(bool); isBool && ok {
					continue
				}
				v.s.metrics.guardRefusal(keybrake.GuardRule, r.rule.Name)
				return &keybrake.Error{Code: keybrake.EFORBIDDEN, Message: fmt.Sprintf("keybrake refused %s: field rule %q (%s) is false for %s%s. Nothing was sent to Stripe.", op.Name, r.rule.Name, r.rule.Expr, what, asName(op.Name, name))}
			}
			v.s.metrics.guardRefusal(keybrake.GuardRule, r.rule.Name)
			return &keybrake.Error{Code: keybrake.EFORBIDDEN, Message: fmt.Sprintf("keybrake refused %s: field rule %q (%s) could not be evaluated on %s%s (%s), so it refuses (fail closed). Nothing was sent to Stripe.", op.Name, r.rule.Name, r.rule.Expr, what, asName(op.Name, name), err)}
		}
	}
	return nil
}

// operationNames is op first, then its other names (stripe.Aliases).
func operationNames(op string) []string {
	names := []string{op}
	for _, a := range stripe.Aliases(op) {
		if a != op {
			names = append(names, a)
		}
	}
	return names
}

// asName says under which name a rule was false, when not the request's.
func asName(op, name string) string {
	if name == op {
		return ""
	}
	return " with operation bound to " + name + ", another name of " + op
}

// appliesTo reports whether a rule for ops applies to op: the operations
// named, or when none is named, every operation that may move money
// (priced or unpriced), so a rule on amount does not refuse reads.
func appliesTo(ops []string, op string, class stripe.Class) bool {
	if len(ops) == 0 {
		return class == stripe.ClassPriced || class == stripe.ClassUnpriced
	}
	return namesOperation(ops, op) // aliases.go: under any of its names
}

// ruleVars binds the variables of a request; absent parameters stay unbound.
func ruleVars(operation, account string, form *stripe.Form) map[string]any {
	vars := map[string]any{"operation": operation, "account": account, "request": map[string]any{}, "metadata": map[string]string{}}
	if form == nil {
		return vars
	}
	vars["request"] = form.Tree
	if md := form.Map("metadata"); md != nil {
		vars["metadata"] = md
	}
	if td, ok := chargeDestination(operation, form.Tree); ok {
		// A charge's legacy destination sends its funds on as
		// transfer_data does: a rule on transfer_data reads it too.
		request := make(map[string]any, len(form.Tree)+1)
		for k, v := range form.Tree {
			request[k] = v
		}
		request["transfer_data"] = td
		vars["request"] = request
	}
	if td, ok := vars["request"].(map[string]any)["transfer_data"].(map[string]any); ok {
		vars["transfer_data"] = td
	}
	for _, n := range ruleStrings {
		if v, ok := form.Get(n); ok {
			if n == "currency" {
				v = strings.ToLower(v)
			}
			vars[n] = v
		}
	}
	for _, n := range ruleInts {
		if v, ok := form.Get(n); ok {
			if i, err := strconv.ParseInt(v, 10, 64); err == nil {
				vars[n] = i
			}
		}
	}
	return vars
}

// chargeDestination returns a charge's legacy destination (destination=
// acct_…, or destination[account] and destination[amount]) as the
// transfer_data it stands for, when the charge sends no transfer_data of
// its own.
func chargeDestination(operation string, tree map[string]any) (map[string]any, bool) {
	if operation != "charges.create" || tree["transfer_data"] != nil {
		return nil, false
	}
	switch d := tree["destination"].(type) {
	case string:
		return map[string]any{"destination": d}, true
	case map[string]any:
		td := map[string]any{}
		if a, ok := d["account"]; ok {
			td["destination"] = a
		}
		if a, ok := d["amount"]; ok {
			td["amount"] = a
		}
		return td, true
	}
	return nil, false
}
