package http_test

import (
	"net/url"
	"strings"
)

type urlURL = url.URL

func parseURL(s string) (*url.URL, error) { return url.Parse(s) }

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
