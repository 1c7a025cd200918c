package stripesim

import "net/http"

// createCustomer serves POST /v1/customers.
func createCustomer(s *Server, c *call) (any, *apiError) {
	f := c.form
	if aerr := allow(f, "email", "name", "description", "metadata", "phone", "source", "payment_method"); aerr != nil {
		return nil, aerr
	}
	cus := &Customer{ID: newID("cus"), Object: "customer", Created: c.now.Unix(), Account: c.account}
	var aerr *apiError
	for _, p := range []struct {
		name string
		dst  *string
	}{{"email", &cus.Email}, {"name", &cus.Name}, {"description", &cus.Description}} {
		if *p.dst, aerr = optional(f, p.name); aerr != nil {
			return nil, aerr
		}
	}
	if cus.Metadata, aerr = metadataParam(f); aerr != nil {
		return nil, aerr
	}
	cus.Metadata = mergeMetadata(nil, cus.Metadata)
	for _, param := range []string{"source", "payment_method"} {
		src, aerr := optional(f, param)
		if aerr != nil {
			return nil, aerr
		}
		if src != "" && !knownCard(param, src) {
			return nil, errNoSuchCard(param, src)
		}
		if src != "" {
			cus.DefaultSource = src
		}
	}
	s.st.Customers = append(s.st.Customers, cus)
	s.st.customers[cus.ID] = cus
	s.st.Owners[cus.ID] = c.scope
	return cus, nil
}

// retrieveCustomer serves GET /v1/customers/{id}.
func retrieveCustomer(s *Server, c *call) (any, *apiError) {
	if aerr := noParams(c.form); aerr != nil {
		return nil, aerr
	}
	cus, ok := lookup(s.st, s.st.customers, c.scope, c.id)
	if !ok {
		return nil, errNoSuch(http.StatusNotFound, "customer", "id", c.id)
	}
	return cus, nil
}
