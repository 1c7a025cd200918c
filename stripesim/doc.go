// Package stripesim is a stateful simulator of the part of the Stripe API
// that billing code and agents use, with fault injection, for tests and the
// failure-mode harness.
//
// # API
//
// Under /v1/, authenticated with a sk_test_… key (Bearer or Basic auth):
//
//	POST /v1/customers                       GET /v1/customers/{id}
//	POST /v1/customers/{id}                  (email, name, source, invoice_settings[default_payment_method]…)
//	POST /v1/charges                         GET /v1/charges/{id}
//	POST /v1/charges/{id}                    (description, metadata)
//	POST /v1/charges/{id}/capture            (amount: partial capture releases the rest)
//	GET  /v1/charges?customer=&created[gte]=&limit=&starting_after=&ending_before=
//	GET  /v1/charges/search?query=metadata['order']:'42'
//	POST /v1/payment_intents                 GET /v1/payment_intents/{id}
//	POST /v1/payment_intents/{id}            (update amount, metadata…)
//	POST /v1/payment_intents/{id}/confirm    POST /v1/payment_intents/{id}/capture
//	                                         (confirm: amount_to_confirm, secret key only, is confirmed
//	                                         instead of the amount and becomes it)
//	POST /v1/payment_intents/{id}/cancel     POST /v1/payment_intents/{id}/increment_authorization
//	POST /v1/invoiceitems                    GET /v1/invoiceitems/{id}
//	                                         (amount, negative for a credit, or pricing[price] of a
//	                                         one-time price and quantity: amount = unit_amount × quantity)
//	POST /v1/invoices                        GET /v1/invoices/{id}
//	                                         (pending_invoice_items_behavior=include takes the customer's
//	                                         pending items; not sent, it is include before Stripe-Version
//	                                         2022-08-01 and exclude since)
//	POST /v1/invoices/{id}                   DELETE /v1/invoices/{id} (drafts)
//	POST /v1/invoices/{id}/add_lines         (lines[N][amount], [description], [metadata])
//	POST /v1/invoices/{id}/finalize          POST /v1/invoices/{id}/pay
//	POST /v1/invoices/{id}/void
//	POST /v1/products                        GET /v1/products/{id}   GET /v1/products?active=&limit=
//	POST /v1/prices                          GET /v1/prices/{id}     GET /v1/prices?product=&active=&currency=&type=&limit=
//	                                         (per_unit: unit_amount, currency, product or product_data[name],
//	                                         recurring[interval] optional)
//	POST /v1/payment_links                   GET /v1/payment_links/{id}
//	                                         (line_items[N][price] and [quantity], after_completion; a url
//	                                         on buy.stripe.com that the simulator does not serve)
//	POST /v1/refunds                         GET /v1/refunds/{id}
//	POST /v1/charges/{id}/refunds            POST /v1/charges/{id}/refund (legacy: answers the charge)
//	POST /v1/transfers                       GET /v1/transfers/{id}
//	POST /v1/payouts                         GET /v1/payouts/{id}
//
// A browser's publishable key (pk_test_…) may call only
// POST /v1/payment_intents/{id}/confirm and GET /v1/payment_intents/{id},
// with the PaymentIntent's client_secret, and acts in the account that owns
// the PaymentIntent (send Stripe-Account for a connected account's); it is
// refused with a 401 everywhere else. The confirmation is the secret-key
// one: money that became movable is movable without the secret key.
//
// Requests and answers follow Stripe: form-encoded parameters, strict
// validation (parameter_unknown, parameter_missing, amount_too_small,
// amount_too_large, invalid_currency), Stripe-shaped errors, a Request-Id on
// every response, data and Idempotency-Keys scoped by API key and
// Stripe-Account. A Stripe-Context: acct_… header, which Stripe's newer SDKs
// may send on v1 requests, selects the account exactly as Stripe-Account
// does; both headers naming different accounts, or a Stripe-Context that is
// not a single acct_ id, is a 400 invalid_request_error. Idempotency-Keys replay the first response (2xx or 402)
// with Idempotent-Replayed: true for 24 hours of simulator time, answer 400
// idempotency_error for other parameters or another endpoint, and 409
// idempotency_key_in_use while the first request is executing.
//
// # Time
//
// Money that Stripe moves or releases by itself does so on the simulator
// clock (Options.Now plus every Advance), applied when the clock advances
// and lazily before every request and every read of the ground truth:
// charges with capture=false, and capture_method=manual PaymentIntents, hold
// an authorization that is released after 7 days (the charge stays
// succeeded, captured false, refunded true, amount_refunded = amount; the
// PaymentIntent is canceled with reason automatic). A draft invoice with
// auto_advance=true finalizes 1 hour after creation; an open
// charge_automatically invoice with auto_advance=true charges the customer
// 1 hour after finalization: the invoice's default_payment_method, else the
// customer's invoice_settings[default_payment_method], else its default
// source. Such charges are created at the time they fell due and appear in
// the ground truth like any other. A declined automatic attempt is not
// retried.
//
// Test cards: source=tok_visa and payment_method=pm_card_visa succeed;
// tok_chargeDeclined / pm_card_chargeDeclined decline (402 card_declined,
// generic_decline), …InsufficientFunds declines with insufficient_funds. The
// declined charge exists with status failed. source=btok_us_verified (a
// verified US bank account) makes a charge that is accepted "pending",
// captured but not paid, as a bank debit on Stripe, and stays so.
//
// # Admin
//
// Under /_sim/, without authentication, JSON:
//
//	GET    /_sim/objects        every object created (GroundTruth), in creation order,
//	                            including those whose response a fault lost
//	GET    /_sim/moved          the money that actually moved (MoneyMoved): per currency,
//	                            captured charges, transfers, payouts, and refunds apart,
//	                            per connected account ("" is the platform) and in total
//	GET    /_sim/faults         the faults, with how many requests matched and fired them
//	POST   /_sim/faults         add a Fault, e.g. {"path":"/v1/charges","mode":"cut_after","nth":2};
//	                            latency is a Go duration string ("250ms") or milliseconds;
//	                            answers {"id":"flt_1"}
//	DELETE /_sim/faults         remove every fault
//	DELETE /_sim/faults/{id}    remove one fault
//	GET    /_sim/clock          {"now": unix seconds, "offset_seconds": N}
//	POST   /_sim/clock/advance  {"seconds": N} moves the clock forward
//
// # Faults
//
// A fault matches API requests by method and path (exact, or a prefix ending
// in "*"), on every match, only the nth, or with a seeded probability, at
// most Count times. FaultLatency delays the request while it holds its
// Idempotency-Key; FaultFailBefore answers 500 without processing;
// FaultFailAfter processes, saves the idempotent response, then answers 500;
// FaultCutAfter processes, saves, then closes the connection without a byte.
// These are the windows in which duplicate charges happen: after
// FaultFailAfter or FaultCutAfter a retry with the same Idempotency-Key gets
// the real response, as on Stripe.
package stripesim
