package guard_test

import (
	"fmt"
	"net/http"

	"github.com/anteroomhq/anteroom/gate/guard"
)

// A checkout API that lets in one request per admission token: verified
// offline with the sidecar's JWKS, redeemed once through the sidecar.
func ExampleNewAdmissionVerifier() {
	v, err := guard.NewAdmissionVerifier(guard.AdmissionOptions{
		Gate:      "sale",
		JWKSURL:   "http://anteroom:8080/anteroom/.well-known/jwks.json",
		RedeemURL: "http://anteroom:8080/anteroom/api/redeem",
		APIKey:    "checkout-api-key-0123456789",
	})
	if err != nil {
		panic(err)
	}
	checkout := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := guard.AdmissionFrom(r.Context())
		fmt.Fprintf(w, "checking out session %s (admission %s)\n", a.Claims.Subject, a.Claims.ID)
	})
	mux := http.NewServeMux()
	mux.Handle("/checkout", v.Middleware(checkout))
	_ = mux
}
