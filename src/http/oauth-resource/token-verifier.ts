/**
 * Checks the JWT access tokens of the authorization servers the store trusts, locally: the issuer
 * must be one of them (its `iss`, exactly), the signature one of its keys' (asymmetric algorithms
 * only), the audience the resource the request is for (RFC 8707: a token for another resource is
 * refused; scheme and host compared case-blind), the token not expired nor not yet valid. Its claims then give the principal
 * (src/http/oauth-resource/token-claims.ts). Each trusted issuer is `{ issuer, keys, claimMap }`:
 * an external one (src/http/oauth-resource/external-issuer.ts) or any other that can hand jose a key.
 */
import { decodeJwt, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from "jose"
import type { Principal } from "../../config/api-keys.js"
import { claimMapOf, type ClaimMap } from "../../domain/claim-map.js"
import { principalOfClaims } from "./token-claims.js"

/** An authorization server whose tokens the store accepts. */
export interface TrustedIssuer {
  /** Its issuer identifier: a token's `iss` must be exactly this. */
  readonly issuer: string
  /** Its public keys, as jose's `jwtVerify` takes them. */
  readonly keys: JWTVerifyGetKey
  /** Which claims give the principal (default: role, agent_id, tools, scope). */
  readonly claimMap?: ClaimMap | undefined
  /** Whether a verified token was revoked before it expires (an issuer that keeps such a list: the built-in one). */
  readonly revoked?: ((payload: JWTPayload) => boolean) | undefined
}

/** What a presented token is. `why` names the refusal for the log and the challenge; the message is for the client. */
export type TokenCheck =
  | { readonly ok: true; readonly principal: Principal; readonly scopes: ReadonlySet<string>; readonly label: string }
  | {
      readonly ok: false
      readonly why: "malformed" | "issuer" | "signature" | "audience" | "expired" | "claims" | "revoked" | "unavailable"
      readonly message: string
      /** For the log only: what failed underneath (a key set that could not be fetched). */
      readonly detail?: string | undefined
    }

/** Signature algorithms accepted: asymmetric only (no `none`, no shared secret). */
const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"]
/** A token longer than this is refused unread. */
export const MAX_TOKEN_LENGTH = 16 * 1024
/** Clock skew tolerated on `exp`, `nbf` and `iat` (seconds). */
const CLOCK_TOLERANCE_SECONDS = 30

/** Whether a bearer credential has the shape of a JWT (three base64url parts), so is a token's to check rather than a key's. */
export const looksLikeJwt = (credential: string): boolean =>
  credential.length <= MAX_TOKEN_LENGTH && /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(credential)

/** The label of a token in log lines: who it names, never the token. */
const labelOf = (payload: JWTPayload): string => {
  const who = typeof payload.sub === "string" ? payload.sub : typeof payload["client_id"] === "string" ? (payload["client_id"] as string) : "?"
  return `token of '${who.slice(0, 100)}' from ${String(payload.iss).slice(0, 200)}`
}

/**
 * The verifier over a list of trusted issuers; `denyByDefault` as the keys' (an agent without
 * `tools` sees none). An issuer known only once the server listens (one whose identifier is the
 * store's own URL) is added then with `trust`.
 */
export class TokenVerifier {
  readonly #issuers = new Map<string, TrustedIssuer>()

  constructor(
    issuers: ReadonlyArray<TrustedIssuer>,
    private readonly denyByDefault = false
  ) {
    for (const issuer of issuers) this.trust(issuer)
  }

  /** Accepts the tokens of one more issuer (one identifier, one entry: a second one replaces the first). */
  trust(issuer: TrustedIssuer): void {
    this.#issuers.set(issuer.issuer, issuer)
  }

  /** The issuers' identifiers, for the protected resource metadata. */
  get issuers(): ReadonlyArray<string> {
    return [...this.#issuers.keys()]
  }

  /** Checks `token` for a request to one of `audiences` (the resource URIs it may be for). */
  async verify(token: string, audiences: ReadonlyArray<string>): Promise<TokenCheck> {
    if (!looksLikeJwt(token)) return { ok: false, why: "malformed", message: "The access token is not a JWT" }
    let unverified: JWTPayload
    try {
      unverified = decodeJwt(token)
    } catch {
      return { ok: false, why: "malformed", message: "The access token is not a JWT" }
    }
    const trusted = typeof unverified.iss === "string" ? this.#issuers.get(unverified.iss) : undefined
    if (trusted === undefined) return { ok: false, why: "issuer", message: "The access token's issuer is not trusted by this store" }
    let payload: JWTPayload
    try {
      ;({ payload } = await jwtVerify(token, trusted.keys, {
        issuer: trusted.issuer,
        algorithms: ALGORITHMS,
        clockTolerance: CLOCK_TOLERANCE_SECONDS,
        requiredClaims: ["exp", "aud"]
      }))
    } catch (e) {
      return refusal(e)
    }
    if (!forAudience(payload.aud, audiences)) return { ok: false, why: "audience", message: AUDIENCE_MESSAGE }
    if (trusted.revoked?.(payload) === true) return { ok: false, why: "revoked", message: "The access token was revoked" }
    const outcome = principalOfClaims(payload, trusted.claimMap ?? claimMapOf(undefined), this.denyByDefault)
    if ("problem" in outcome) return { ok: false, why: "claims", message: `The access token gives no principal here: ${outcome.problem}` }
    const label = labelOf(payload)
    return { ok: true, principal: { ...outcome.principal, label }, scopes: outcome.scopes, label }
  }
}

const AUDIENCE_MESSAGE = "The access token is for another resource (its audience is not this endpoint)"

/**
 * A resource URI as compared: scheme and host lower-cased (the MCP authorization spec asks servers to
 * accept upper-case ones), no trailing slash; undefined when it is no URL.
 */
const canonicalUri = (uri: string): string | undefined => {
  try {
    const url = new URL(uri)
    return `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}${url.search}`
  } catch {
    return undefined
  }
}

/** Whether a token's `aud` (one URI or a list) names one of `audiences`. */
const forAudience = (aud: string | ReadonlyArray<string> | undefined, audiences: ReadonlyArray<string>): boolean => {
  const wanted = new Set(audiences.map(canonicalUri))
  const named = typeof aud === "string" ? [aud] : (aud ?? [])
  return named.slice(0, 100).some((a) => typeof a === "string" && wanted.has(canonicalUri(a) ?? "\0"))
}

/** A jose failure in the client's words. */
const refusal = (e: unknown): TokenCheck & { ok: false } => {
  if (e instanceof errors.JWTExpired) return { ok: false, why: "expired", message: "The access token has expired" }
  if (e instanceof errors.JWTClaimValidationFailed) {
    if (e.claim === "aud") return { ok: false, why: "audience", message: AUDIENCE_MESSAGE }
    if (e.claim === "iss") return { ok: false, why: "issuer", message: "The access token's issuer is not trusted by this store" }
    return { ok: false, why: "claims", message: `The access token's '${e.claim}' claim is refused (${e.reason})` }
  }
  if (e instanceof errors.JWSSignatureVerificationFailed || e instanceof errors.JWKSNoMatchingKey || e instanceof errors.JWKSMultipleMatchingKeys || e instanceof errors.JOSEAlgNotAllowed) {
    return { ok: false, why: "signature", message: "The access token's signature is not one of its issuer's keys" }
  }
  if (e instanceof errors.JWSInvalid || e instanceof errors.JWTInvalid || e instanceof errors.JOSENotSupported) {
    return { ok: false, why: "malformed", message: "The access token is not a valid JWT" }
  }
  return { ok: false, why: "unavailable", message: "The access token could not be checked: its issuer's keys are unavailable", detail: e instanceof Error ? e.message : String(e) }
}
