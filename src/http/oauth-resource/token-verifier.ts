/**
 * Checks the JWT access tokens of the authorization servers the store trusts, locally: the issuer
 * must be one of them (its `iss`, exactly), the signature one of its keys' (asymmetric algorithms
 * only), the audience the resource the request is for (RFC 8707: a token for another resource is
 * refused; scheme and host compared case-blind), the token not expired nor not yet valid. Its claims then give the principal
 * (src/http/oauth-resource/token-claims.ts). Each trusted issuer is `{ issuer, keys, claimMap }`:
 * an external one (src/http/oauth-resource/external-issuer.ts) or any other that can hand jose a key.
 *
 * An opaque access token (not a JWT) is asked about at the issuer that introspects (RFC 7662), and
 * held to the same rules: active, its issuer's, for this resource, not expired. Its answer is kept
 * by the token's hash, at most a minute and never past its expiry (an inactive answer a minute too),
 * at most 10,000 answers of at most 16 KiB; the same token asked twice at once is one question, and at most 32
 * questions are under way (more are refused as unavailable, not queued: a flood of made-up tokens
 * does not become a flood at the issuer).
 *
 * jose is loaded by the first JWT to check: a store that is sent none (most have no issuer) never
 * loads it.
 */
import { createHash } from "node:crypto"
import type { JWTPayload, JWTVerifyGetKey } from "jose"
import { onDemand } from "../../domain/on-demand.js"
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
  /** Its introspection endpoint's answer about an opaque token (RFC 7662), when the store may ask it. */
  readonly introspect?: ((token: string) => Promise<Record<string, unknown>>) | undefined
}

/** What a presented token is. `why` names the refusal for the log and the challenge; the message is for the client. */
export type TokenCheck =
  | { readonly ok: true; readonly principal: Principal; readonly scopes: ReadonlySet<string>; readonly label: string }
  | {
      readonly ok: false
      readonly why: "malformed" | "issuer" | "signature" | "audience" | "expired" | "claims" | "revoked" | "inactive" | "unavailable"
      readonly message: string
      /** For the log only: what failed underneath (a key set that could not be fetched). */
      readonly detail?: string | undefined
    }

/** jose, loaded by the first JWT to check or an external issuer's first discovery (external-issuer.ts). */
export const jose = onDemand(() => import("jose"))

/** Signature algorithms accepted: asymmetric only (no `none`, no shared secret). */
const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA", "Ed25519"]
/** A token longer than this is refused unread. */
export const MAX_TOKEN_LENGTH = 16 * 1024
/** Clock skew tolerated on `exp`, `nbf` and `iat` (seconds): a revocation must outlast a token's `exp` by as much. */
export const CLOCK_TOLERANCE_SECONDS = 30

/** Whether a bearer credential has the shape of a JWT (three base64url parts), so is a token's to check rather than a key's. */
export const looksLikeJwt = (credential: string): boolean =>
  credential.length <= MAX_TOKEN_LENGTH && /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/.test(credential)

/** Whether a bearer credential could be an opaque access token (RFC 6750's token68 characters, bounded). */
export const looksLikeOpaque = (credential: string): boolean => credential.length >= 8 && credential.length <= 4096 && /^[A-Za-z0-9._~+/-]+=*$/.test(credential)

/** Opaque tokens' answers kept, questions under way at most, and how long an answer is kept (ms). */
const INTROSPECTED_KEPT = 10_000
const INTROSPECTIONS_AT_ONCE = 32
const INTROSPECTED_MAX_AGE_MS = 60_000

/** An issuer's answer about an opaque token, as kept: its claims (active), or inactive. */
type Introspected = { readonly claims: JWTPayload | undefined; readonly until: number }

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
  /** Answers about opaque tokens by the token's SHA-256 (oldest first), and the questions under way. */
  readonly #introspected = new Map<string, Introspected>()
  readonly #asking = new Map<string, Promise<Introspected>>()

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

  /** The issuer asked about opaque tokens, if any. */
  get #introspector(): TrustedIssuer | undefined {
    for (const issuer of this.#issuers.values()) if (issuer.introspect !== undefined) return issuer
    return undefined
  }

  /** Whether opaque access tokens are accepted (an issuer introspects them). */
  get introspects(): boolean {
    return this.#introspector !== undefined
  }

  /** Checks `token` for a request to one of `audiences` (the resource URIs it may be for). */
  async verify(token: string, audiences: ReadonlyArray<string>): Promise<TokenCheck> {
    if (!looksLikeJwt(token)) {
      const introspector = this.#introspector
      if (introspector !== undefined && looksLikeOpaque(token)) return this.#verifyOpaque(introspector, token, audiences)
      return { ok: false, why: "malformed", message: "The access token is not a JWT" }
    }
    let lib: typeof import("jose")
    try {
      lib = jose.loaded ?? (await jose.load())
    } catch (e) {
      return { ok: false, why: "unavailable", message: "The access token could not be checked now; try again", detail: e instanceof Error ? e.message : String(e) }
    }
    const { decodeJwt, jwtVerify } = lib
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
      return refusal(lib.errors, e)
    }
    if (!forAudience(payload.aud, audiences)) return { ok: false, why: "audience", message: AUDIENCE_MESSAGE }
    if (trusted.revoked?.(payload) === true) return { ok: false, why: "revoked", message: "The access token was revoked" }
    return this.#principal(trusted, payload)
  }

  /** The principal of a token's checked claims. */
  #principal(trusted: TrustedIssuer, payload: JWTPayload): TokenCheck {
    const outcome = principalOfClaims(payload, trusted.claimMap ?? claimMapOf(undefined), this.denyByDefault)
    if ("problem" in outcome) return { ok: false, why: "claims", message: `The access token gives no principal here: ${outcome.problem}` }
    const label = labelOf(payload)
    return { ok: true, principal: { ...outcome.principal, label }, scopes: outcome.scopes, label }
  }

  /** An opaque token: the issuer's answer (kept, or asked now), held to a JWT's rules. */
  async #verifyOpaque(trusted: TrustedIssuer, token: string, audiences: ReadonlyArray<string>): Promise<TokenCheck> {
    const hash = createHash("sha256").update(token).digest("base64url")
    let answer = this.#introspected.get(hash)
    if (answer !== undefined && answer.until <= Date.now()) {
      this.#introspected.delete(hash)
      answer = undefined
    }
    if (answer === undefined) {
      let asking = this.#asking.get(hash)
      if (asking === undefined) {
        if (this.#asking.size >= INTROSPECTIONS_AT_ONCE) {
          return { ok: false, why: "unavailable", message: "The access token could not be checked now: too many tokens are being checked; try again", detail: `${INTROSPECTIONS_AT_ONCE} introspections under way` }
        }
        asking = this.#introspect(trusted, token, hash)
        this.#asking.set(hash, asking)
        void asking.finally(() => this.#asking.delete(hash)).catch(() => undefined)
      }
      try {
        answer = await asking
      } catch (e) {
        return { ok: false, why: "unavailable", message: "The access token could not be checked: its issuer's introspection endpoint is unavailable", detail: e instanceof Error ? e.message : String(e) }
      }
    }
    const payload = answer.claims
    if (payload === undefined) return { ok: false, why: "inactive", message: "The access token is not active (its issuer does not know it, or it expired or was revoked)" }
    if (payload.iss !== undefined && payload.iss !== trusted.issuer) return { ok: false, why: "issuer", message: "The access token's issuer is not trusted by this store" }
    const now = Date.now() / 1000
    if (typeof payload.exp === "number" && payload.exp + CLOCK_TOLERANCE_SECONDS < now) return { ok: false, why: "expired", message: "The access token has expired" }
    if (typeof payload.nbf === "number" && payload.nbf - CLOCK_TOLERANCE_SECONDS > now) return { ok: false, why: "claims", message: "The access token's 'nbf' claim is refused (not yet valid)" }
    if (!forAudience(payload.aud, audiences)) return { ok: false, why: "audience", message: AUDIENCE_MESSAGE }
    // A token bound to a key (DPoP, mutual TLS) is good only with a proof of it, which this store does not check.
    if (payload["cnf"] !== undefined) return { ok: false, why: "claims", message: "The access token is bound to a key ('cnf'), which this store cannot check" }
    return this.#principal(trusted, { iss: trusted.issuer, ...payload })
  }

  /** Asks the issuer about a token and keeps the answer (an active one never past its `exp`). */
  async #introspect(trusted: TrustedIssuer, token: string, hash: string): Promise<Introspected> {
    const body = await trusted.introspect!(token)
    // Kept answers are bounded as tokens are: 16 KiB each at most.
    if (JSON.stringify(body).length > MAX_TOKEN_LENGTH) throw new Error(`the introspection answer is over ${MAX_TOKEN_LENGTH} characters`)
    const now = Date.now()
    const tokenType = typeof body["token_type"] === "string" ? body["token_type"].toLowerCase() : undefined
    // Only a bearer access token is one: a refresh token's answer is no grant to act, and a DPoP token
    // is good only with a proof of its key (as any token with `cnf`, refused with the claims' checks).
    const active = body["active"] === true && (tokenType === undefined || tokenType === "bearer" || tokenType === "access_token")
    const exp = typeof body["exp"] === "number" ? body["exp"] * 1000 : undefined
    const { active: _active, ...claims } = body
    const answer: Introspected = { claims: active ? (claims as JWTPayload) : undefined, until: Math.min(now + INTROSPECTED_MAX_AGE_MS, active && exp !== undefined ? exp : Infinity) }
    if (this.#introspected.size >= INTROSPECTED_KEPT) {
      const oldest = this.#introspected.keys().next()
      if (oldest.done !== true) this.#introspected.delete(oldest.value)
    }
    this.#introspected.set(hash, answer)
    return answer
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
const refusal = (errors: typeof import("jose").errors, e: unknown): TokenCheck & { ok: false } => {
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
