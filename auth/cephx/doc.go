// Package cephx implements Ceph's cephx authentication, both roles, as
// Ceph 16.2 (Pacific) speaks it: keyrings and keys, the AES-128-CBC
// envelopes, the mon login with its challenge, tickets, service tickets
// and their renewal, authorizers with the cephx v2 challenge, rotating
// service secrets, and the server side that issues and verifies all of
// these.
//
// The package is pure: it does no I/O (except LoadKeyring), starts no
// goroutines and never reads the wall clock itself. Time comes from a
// clock given in each config (Now; time.Now only when none is given) and
// randomness from a reader (Rand; crypto/rand only when none is given),
// so every flow can be driven deterministically.
//
// # Client flows
//
// A Client holds an entity's state: name, key, global id, the AUTH ticket
// and service tickets. Client.Handler returns a per-connection
// auth.Client that a protocol engine drives:
//
//   - Mon login (msgr2 AUTH_REQUEST with AUTH_MODE_MON): Request sends our
//     name and global id, ReplyMore answers the mon's CephXServerChallenge
//     with GET_AUTH_SESSION_KEY (proof of our key, the old AUTH ticket
//     when reclaiming a global id, and the services wanted), and Done
//     decrypts the AUTH ticket with our key, the connection secret and the
//     extra service tickets with the new session key. A client that holds
//     an unexpired AUTH ticket reconnects with its global id and that
//     ticket; otherwise it logs in afresh with global id 0 (the
//     CVE-2021-20288 rules of 16.2.1+: it never reclaims without a ticket).
//   - Authorizer (OSD, MGR, MDS): Request presents the service ticket
//     (auth.ErrNoTicket without a valid one), ReplyMore answers the
//     service's challenge with challenge+1, and Done checks the service's
//     reply (nonce+1) and takes the connection secret in secure mode.
//
// Over the established mon session, MAuth messages carry the rest:
// RenewRequest renews the AUTH ticket or the service tickets a quarter of
// their validity before they expire (Need and NextRenewal say when),
// ServiceTicketRequest asks for tickets explicitly, RotatingKeyRequest
// fetches a service entity's rotating secrets; HandleMAuthReply takes the
// replies. MAuthLogin is the whole mon login over MAuth, as msgr1 does it.
//
// # Server flows
//
// A KeyServer is a mon's key database: entities' keys and caps (from a
// keyring), rotating secrets per service type (three, previous, current
// and next, rotated by the injected clock), global id assignment.
// KeyServer.Handler returns a per-connection MonSession, an auth.Server
// for mon-mode logins that also answers the session's later MAuth
// requests (HandleMAuth): AUTH ticket renewal, service tickets, rotating
// secrets.
//
// A Verifier is a service's side: it verifies authorizers with its type's
// rotating secrets (fetched from a mon with a Client, or installed) or
// with a static service key, challenges every client, checks ticket
// expiry against its clock, and returns the peer's name, global id and
// caps in the auth.Result. In secure mode the reply carries a 64-byte
// connection secret.
//
// A server that is both (a ferry-only cluster) gives each connection a
// CombinedServer, which routes mon-mode logins to the KeyServer and
// authorizers to a Verifier built on the same KeyServer
// (VerifierConfig.KeyServer), whose secrets it then follows as they
// rotate; or it seals a service's tickets with a static key
// (KeyServerConfig.StaticServiceKeys, VerifierConfig.StaticKey).
//
// # Primitives
//
// Key.Encrypt/Decrypt are AES-128-CBC with Ceph's fixed IV and PKCS#7
// padding; Key.Seal/Open the envelope (version 1 and AUTH_ENC_MAGIC) in
// the "enc_bl" form; AppendEncrypted/DecodeEncrypted the length-prefixed
// "encode_encrypt" form. ChallengeProof is the mon login proof,
// AuthSignature msgr2's AUTH_SIGNATURE HMAC, MessageSignature msgr1's
// message signature.
package cephx
