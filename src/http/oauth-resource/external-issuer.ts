/**
 * An external authorization server the store trusts (`--auth-issuer`): its OpenID Connect discovery
 * document (or, failing that, its RFC 8414 metadata) names its JWKS, whose public keys check the
 * signatures of the JWT access tokens it issues. Every request to it goes through the store's
 * outbound policy (src/mcp/upstream-policy.ts) with a time-out, a size limit on the answer and no
 * redirect followed (src/mcp/bounded-fetch.ts).
 *
 * Discovery is lazy and retried: a store that starts while the authorization server is down still
 * starts, answers tokens 401 until it is reachable, and asks again at most once per `cooldownMs`.
 * The keys are jose's remote key set: cached (`cacheMaxAgeMs`), fetched again on a token whose `kid`
 * it does not know (a rotated key), at most once per `cooldownMs`. With the store's own client at
 * the issuer (`introspection`), an opaque access token is asked about at the metadata's
 * `introspection_endpoint` (RFC 7662), the client authenticated with HTTP Basic. Nothing here holds
 * a timer; `close` aborts the requests in flight. jose is loaded with the first discovery.
 */
import type { JWTVerifyGetKey } from "jose"
import { boundedFetch } from "../../mcp/bounded-fetch.js"
import type { UpstreamPolicy } from "../../mcp/upstream-policy.js"
import { log } from "../../logging/log.js"
import type { ClaimMap } from "../../domain/claim-map.js"
import { jose, type TrustedIssuer } from "./token-verifier.js"


export interface ExternalIssuerOptions {
  /** The issuer identifier (`--auth-issuer`), exactly as its tokens' `iss`. */
  readonly issuer: string
  readonly claimMap: ClaimMap
  readonly policy: UpstreamPolicy
  /** Each request to the authorization server (ms). */
  readonly timeoutMs?: number
  /** The largest discovery document or JWKS read (bytes). */
  readonly maxBytes?: number
  /** The shortest time between two fetches of the keys, or two discovery attempts (ms). */
  readonly cooldownMs?: number
  /** How long fetched keys are used before they are fetched again (ms). */
  readonly cacheMaxAgeMs?: number
  /** The store's client at the issuer, for its introspection endpoint; without it opaque tokens are not asked about. */
  readonly introspection?: { readonly clientId: string; readonly clientSecret: string } | undefined
}

const DEFAULTS = { timeoutMs: 5_000, maxBytes: 256 * 1024, cooldownMs: 10_000, cacheMaxAgeMs: 600_000 }

/** A discovery or key request that failed: the message says which and why. */
export class IssuerUnavailable extends Error {
  override readonly name = "IssuerUnavailable"
}

/** An issuer the store trusts through its published metadata, with `close` for shutdown. */
export interface ExternalIssuer extends TrustedIssuer {
  /** Discovers the issuer now (at start-up); resolves whatever happens, having logged it. */
  readonly warmUp: () => Promise<void>
  readonly close: () => void
}

/** The well-known URLs of an issuer's metadata, in the order asked: OpenID Connect's, then RFC 8414's. */
const metadataUrls = (issuer: string): ReadonlyArray<string> => {
  const url = new URL(issuer)
  const path = url.pathname === "/" ? "" : url.pathname.replace(/\/$/, "")
  return [`${url.origin}${path}/.well-known/openid-configuration`, `${url.origin}/.well-known/oauth-authorization-server${path}`]
}

export const externalIssuer = (options: ExternalIssuerOptions): ExternalIssuer => {
  const o = { ...DEFAULTS, ...options }
  const closing = new AbortController()
  const fetchBounded = boundedFetch({
    maxMessageBytes: o.maxBytes,
    errorBodyBytes: 1024,
    onTooLarge: (e) => log.warn(`auth issuer ${o.issuer}: an answer was refused: ${e.message}`, { event: "auth_issuer", issuer: o.issuer }),
    fetch: o.policy.fetch
  })
  /** A GET with the time-out, the store's closing signal, and the outbound policy. */
  const get: typeof fetch = (input, init) =>
    fetchBounded(input, { ...init, signal: AbortSignal.any([AbortSignal.timeout(o.timeoutMs), closing.signal, ...(init?.signal ? [init.signal] : [])]) })

  /** The metadata's http(s) URL named `name`, or undefined. */
  const urlIn = (meta: Record<string, unknown>, name: string): URL | undefined => {
    try {
      const url = typeof meta[name] === "string" ? new URL(meta[name] as string) : undefined
      return url !== undefined && (url.protocol === "https:" || url.protocol === "http:") ? url : undefined
    } catch {
      return undefined
    }
  }

  let introspectionUrl: URL | undefined
  const discover = async (): Promise<URL> => {
    const problems: Array<string> = []
    for (const url of metadataUrls(o.issuer)) {
      let doc: unknown
      try {
        const response = await get(url, { headers: { accept: "application/json" } })
        if (!response.ok) {
          await response.body?.cancel().catch(() => undefined)
          problems.push(`${url}: HTTP ${response.status}`)
          continue
        }
        doc = await response.json()
      } catch (e) {
        problems.push(`${url}: ${(e as Error).message}`)
        continue
      }
      const meta = (typeof doc === "object" && doc !== null ? doc : {}) as Record<string, unknown>
      if (meta["issuer"] !== o.issuer) throw new IssuerUnavailable(`${url} names the issuer ${JSON.stringify(meta["issuer"])?.slice(0, 200)}, not ${o.issuer}`)
      const jwksUrl = urlIn(meta, "jwks_uri")
      if (jwksUrl === undefined) throw new IssuerUnavailable(`${url} has no usable jwks_uri`)
      introspectionUrl = urlIn(meta, "introspection_endpoint")
      if (o.introspection !== undefined && introspectionUrl === undefined) {
        log.warn(`auth issuer ${o.issuer}: its metadata names no introspection_endpoint: opaque access tokens are refused`, { event: "auth_issuer", issuer: o.issuer })
      }
      return jwksUrl
    }
    throw new IssuerUnavailable(`no metadata: ${problems.join("; ")}`)
  }

  let keySet: JWTVerifyGetKey | undefined
  let pending: Promise<JWTVerifyGetKey> | undefined
  let failedAt = 0
  let lastFailure: Error | undefined
  /** The remote key set, discovering it first; a failed discovery is tried again only after the cooldown. */
  const keysOf = (): Promise<JWTVerifyGetKey> => {
    if (keySet !== undefined) return Promise.resolve(keySet)
    if (pending !== undefined) return pending
    if (lastFailure !== undefined && Date.now() - failedAt < o.cooldownMs) return Promise.reject(lastFailure)
    pending = Promise.all([discover(), jose.load()]).then(
      ([jwksUrl, { createRemoteJWKSet, customFetch }]) => {
        keySet = createRemoteJWKSet(jwksUrl, { timeoutDuration: o.timeoutMs, cooldownDuration: o.cooldownMs, cacheMaxAge: o.cacheMaxAgeMs, [customFetch]: get })
        pending = undefined
        lastFailure = undefined
        log.info(`auth issuer ${o.issuer}: discovered, keys at ${jwksUrl.href}`, { event: "auth_issuer", issuer: o.issuer, jwks_uri: jwksUrl.href })
        return keySet
      },
      (e: unknown) => {
        pending = undefined
        failedAt = Date.now()
        lastFailure = e instanceof IssuerUnavailable ? e : new IssuerUnavailable(String((e as Error)?.message ?? e))
        log.warn(`auth issuer ${o.issuer}: discovery failed (tokens are refused until it succeeds): ${lastFailure.message}`, { event: "auth_issuer", issuer: o.issuer })
        throw lastFailure
      }
    )
    return pending
  }

  const keys: JWTVerifyGetKey = async (header, token) => (await keysOf())(header, token)

  const client = o.introspection
  /** The issuer's answer about an opaque token (RFC 7662 section 2.2): its JSON object, whatever `active` says. */
  const introspect = async (token: string): Promise<Record<string, unknown>> => {
    await keysOf()
    if (client === undefined || introspectionUrl === undefined) throw new IssuerUnavailable("its metadata names no introspection_endpoint")
    // RFC 6749 section 2.3.1: each part form-encoded before they are joined and base64-encoded.
    const basic = Buffer.from(`${formEncoded(client.clientId)}:${formEncoded(client.clientSecret)}`).toString("base64")
    const response = await get(introspectionUrl, {
      method: "POST",
      headers: { authorization: `Basic ${basic}`, "content-type": "application/x-www-form-urlencoded", accept: "application/json" },
      body: new URLSearchParams({ token, token_type_hint: "access_token" }).toString()
    })
    if (!response.ok) {
      await response.body?.cancel().catch(() => undefined)
      throw new IssuerUnavailable(`its introspection endpoint answered HTTP ${response.status}`)
    }
    const answer: unknown = await response.json().catch(() => undefined)
    if (typeof answer !== "object" || answer === null || Array.isArray(answer)) throw new IssuerUnavailable("its introspection endpoint answered no JSON object")
    return answer as Record<string, unknown>
  }

  return {
    issuer: o.issuer,
    keys,
    claimMap: o.claimMap,
    ...(client === undefined ? {} : { introspect }),
    warmUp: () => keysOf().then(() => undefined, () => undefined),
    close: () => closing.abort()
  }
}

/** `application/x-www-form-urlencoded` encoding of one value. */
const formEncoded = (value: string): string => new URLSearchParams({ v: value }).toString().slice(2)
