package gate

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/anteroomhq/anteroom/session"
)

// The error codes of the HTTP layer beyond those of the session package.
const (
	codeInvalidJSON      session.Code = "invalid_json"
	codeBodyTooLarge     session.Code = "body_too_large"
	codeNoSession        session.Code = "no_session"
	codeRouteNotFound    session.Code = "not_found"
	codeMethodNotAllowed session.Code = "method_not_allowed"
	codeRateLimited      session.Code = "rate_limited"
	codeBadGateway       session.Code = "bad_gateway"
	codeAPIKeyRequired   session.Code = "api_key_required"
	// Reverse-proxy mode: a path that cannot be cleaned unambiguously, an
	// app that sent no response headers in time, a request body that
	// stopped arriving.
	codeInvalidPath     session.Code = "invalid_path"
	codeUpstreamTimeout session.Code = "upstream_timeout"
	codeRequestTimeout  session.Code = "request_timeout"
)

// statusOf is the one place where error codes become HTTP statuses.
func statusOf(code session.Code) int {
	switch code {
	case session.CodeInvalidArgument, codeInvalidJSON, codeInvalidPath:
		return http.StatusBadRequest
	case codeNoSession, codeAPIKeyRequired:
		return http.StatusUnauthorized
	case session.CodeNotActive:
		return http.StatusForbidden
	case session.CodeUnknownGate, session.CodeNotFound, codeRouteNotFound:
		return http.StatusNotFound
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case codeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeRateLimited:
		return http.StatusTooManyRequests
	case session.CodeUnavailable:
		return http.StatusServiceUnavailable
	case codeBadGateway:
		return http.StatusBadGateway
	case codeUpstreamTimeout:
		return http.StatusGatewayTimeout
	case codeRequestTimeout:
		return http.StatusRequestTimeout
	default:
		return http.StatusInternalServerError
	}
}

// ErrorBody is the JSON body of every error answer:
// {"error":{"code":"snake_case","message":"..."}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of an ErrorBody.
type ErrorDetail struct {
	Code    session.Code `json:"code"`
	Message string       `json:"message"`
}

// apiError returns an error the error handler renders with code and message.
func apiError(code session.Code, message string) error {
	return &session.Error{Code: code, Message: message}
}

// errorBody turns any error into the code and message a client sees. Internal
// errors are not described beyond their code.
func errorBody(err error) (int, ErrorBody) {
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
		return statusOf(code), ErrorBody{ErrorDetail{Code: code, Message: msg}}
	}
	code := session.CodeOf(err)
	msg := "internal error"
	var se *session.Error
	if errors.As(err, &se) && code != session.CodeInternal {
		msg = se.Message
	}
	return statusOf(code), ErrorBody{ErrorDetail{Code: code, Message: msg}}
}
