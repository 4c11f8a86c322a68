package gate

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/gate/wire"
	"github.com/anteroomhq/anteroom/session"
)

// Short local names of the wire contract's error codes (package wire is
// their home, and holds the code → status mapping).
const (
	codeInvalidJSON      = wire.CodeInvalidJSON
	codeBodyTooLarge     = wire.CodeBodyTooLarge
	codeNoSession        = wire.CodeNoSession
	codeRouteNotFound    = wire.CodeRouteNotFound
	codeMethodNotAllowed = wire.CodeMethodNotAllowed
	codeRateLimited      = wire.CodeRateLimited
	codeBadGateway       = wire.CodeBadGateway
	codeAPIKeyRequired   = wire.CodeAPIKeyRequired
	codeCrossOrigin      = wire.CodeCrossOrigin
	codeInvalidTicket    = wire.CodeInvalidTicket
	// Reverse-proxy mode: a path that cannot be cleaned unambiguously, an
	// app that sent no response headers in time, a request body that
	// stopped arriving.
	codeInvalidPath     = wire.CodeInvalidPath
	codeUpstreamTimeout = wire.CodeUpstreamTimeout
	codeRequestTimeout  = wire.CodeRequestTimeout
)

// ErrorBody is the JSON body of every error answer (wire.ErrorBody).
type ErrorBody = wire.ErrorBody

// apiError returns an error the error handler renders with code and message.
func apiError(code session.Code, message string) error {
	return &session.Error{Code: code, Message: message}
}

// errorDetail turns any error into the code and message a client sees.
// Internal errors are not described beyond their code, nor is the cause
// of an unavailable store (the database's path or host, a driver's
// words): the log has them (errorAnswered).
func errorDetail(err error) wire.ErrorDetail {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		code := codeRouteNotFound
		switch he.Code {
		case http.StatusMethodNotAllowed:
			code = codeMethodNotAllowed
		case http.StatusRequestEntityTooLarge:
			code = codeBodyTooLarge
		case http.StatusNotFound:
		default:
			code = session.CodeInternal
			if he.Code < 500 {
				code = session.CodeInvalidArgument
			}
		}
		msg := http.StatusText(he.Code)
		if m, ok := he.Message.(string); ok && he.Code < 500 {
			msg = m
		}
		return wire.ErrorDetail{Code: code, Message: msg}
	}
	code := session.CodeOf(err)
	msg := "internal error"
	var se *session.Error
	switch {
	case !errors.As(err, &se) || code == session.CodeInternal:
	case code == session.CodeUnavailable && se.Err != nil:
		msg = session.ErrUnavailable.Message
	default:
		msg = se.Message
	}
	return wire.ErrorDetail{Code: code, Message: msg}
}
