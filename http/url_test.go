package http_test

import "net/url"

type urlURL = url.URL

func parseURL(s string) (*url.URL, error) { return url.Parse(s) }
