package stripesim

import (
	"net/http"
	"strings"
	"time"
)

// createTransfer serves POST /v1/transfers: amount and currency to a
// connected account (acct_…).
func createTransfer(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount", "currency", "destination", "description", "metadata",
		"transfer_group", "source_transaction", "source_type"); aerr != nil {
		return nil, aerr
	}
	amount, currency, aerr := moneyParams(c)
	if aerr != nil {
		return nil, aerr
	}
	dest, aerr := required(f, "destination")
	if aerr != nil {
		return nil, aerr
	}
	if !strings.HasPrefix(dest, "acct_") {
		return nil, errNoSuch(http.StatusBadRequest, "destination", "destination", dest)
	}
	tr := &Transfer{ID: newID("tr"), Object: "transfer", Amount: amount, Created: c.now.Unix(),
		Currency: currency, Destination: dest, Account: c.account}
	if tr.Description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	if tr.TransferGroup, aerr = optional(f, "transfer_group"); aerr != nil {
		return nil, aerr
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	tr.Metadata = mergeMetadata(nil, md)
	s.st.Transfers = append(s.st.Transfers, tr)
	s.st.transfers[tr.ID] = tr
	s.st.Owners[tr.ID] = c.scope
	return tr, nil
}

// retrieveTransfer serves GET /v1/transfers/{id}.
func retrieveTransfer(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	tr, ok := lookup(s.st, s.st.transfers, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "transfer", "id", c.id)
	}
	return tr, nil
}

// createPayout serves POST /v1/payouts: amount and currency to the
// account's default bank account. A payout is created pending and arrives
// two days later.
func createPayout(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "amount", "currency", "description", "metadata", "method",
		"statement_descriptor", "destination", "source_type"); aerr != nil {
		return nil, aerr
	}
	amount, currency, aerr := moneyParams(c)
	if aerr != nil {
		return nil, aerr
	}
	po := &Payout{ID: newID("po"), Object: "payout", Amount: amount, Created: c.now.Unix(),
		ArrivalDate: c.now.Add(48 * time.Hour).Unix(), Currency: currency, Method: "standard",
		Status: "pending", Type: "bank_account", Account: c.account}
	if po.Description, aerr = optional(f, "description"); aerr != nil {
		return nil, aerr
	}
	if m, aerr := optional(f, "method"); aerr != nil {
		return nil, aerr
	} else if m != "" {
		if m != "standard" && m != "instant" {
			return nil, invalid("", "method", "Invalid method: must be one of standard or instant")
		}
		po.Method = m
	}
	md, aerr := metadataParam(f)
	if aerr != nil {
		return nil, aerr
	}
	po.Metadata = mergeMetadata(nil, md)
	s.st.Payouts = append(s.st.Payouts, po)
	s.st.payouts[po.ID] = po
	s.st.Owners[po.ID] = c.scope
	return po, nil
}

// retrievePayout serves GET /v1/payouts/{id}.
func retrievePayout(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	po, ok := lookup(s.st, s.st.payouts, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "payout", "id", c.id)
	}
	return po, nil
}

// moneyParams reads the amount and currency of a transfer or payout; Stripe's
// charge minimums do not apply to them.
func moneyParams(c *call) (int64, string, *apiError) {
	amount, aerr := requiredAmount(c.form, "amount")
	if aerr != nil {
		return 0, "", aerr
	}
	currency, aerr := currencyParam(c.form)
	if aerr != nil {
		return 0, "", aerr
	}
	return amount, currency, checkAmount("amount", amount, currency, false)
}
