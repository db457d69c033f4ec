/**
 * What the transports know of an OAuth-protected upstream (the MCP authorization spec): a bearer
 * token to send, and what to do when the server answers 401 with a `WWW-Authenticate: Bearer`
 * challenge. The flows themselves (discovery, registration, PKCE, refresh, the encrypted tokens)
 * are the runtime's (src/runtime/upstream-oauth.ts, on the SDK's client auth); the transports only see this
 * interface, so a token never passes through anything but a request header.
 *
 * Also here: the fetch the SDK's OAuth requests go through (`oauthFetch`: the outbound policy,
 * bounded answers, a time limit) and the bearer token on a fetch (`fetchWithAuth`, for the SDK's
 * SSE transport).
 */
import { boundedFetch } from "./bounded-fetch.js"
import type { UpstreamPolicy } from "./upstream-policy.js"

/** The parameters of a `WWW-Authenticate: Bearer ...` challenge (RFC 6750, RFC 9728). */
export interface BearerChallenge {
  /** The protected resource metadata URL (`resource_metadata`), when given. */
  readonly resourceMetadataUrl?: string | undefined
  /** The scopes the server asks for (`scope`), when given. */
  readonly scope?: string | undefined
  /** The OAuth error code (`error`), e.g. `invalid_token`. */
  readonly error?: string | undefined
}

/** The token source of one service's connections (one per service, shared by its reconnections). */
export interface UpstreamAuth {
  /** The access token to send now (refreshed first when it is about to expire), or undefined. */
  accessToken(): Promise<string | undefined>
  /**
   * The server refused `rejected` with a bearer challenge. Resolves once a new token is there to
   * retry with (refreshed, obtained with client credentials, or already replaced by a concurrent
   * refresh: one refresh at a time per service); rejects with `AuthorizationRequiredError` when
   * only a user can help (always when `last`: the retry's token was refused too), or with the
   * refresh's own failure otherwise.
   */
  unauthorized(challenge: BearerChallenge, rejected: string | undefined, last: boolean): Promise<void>
}

/** What a user does about a service waiting for an OAuth authorization. */
export const AUTHORIZE_HINT =
  "authorize the store: POST /for_store/authorize_service (or /for_agent/<id>/authorize_service), or run mcp-store auth <service>"

/** The upstream wants an authorization that only a user can give (authorize_service). */
export class AuthorizationRequiredError extends Error {
  readonly _tag = "AuthorizationRequiredError"
  constructor(message: string) {
    super(message)
  }
}

/** The longest `WWW-Authenticate` header read (a hostile server may send anything). */
const MAX_CHALLENGE_CHARS = 4_096

/**
 * The bearer challenge of a `WWW-Authenticate` header, or undefined when the header is missing,
 * too long, or not a Bearer challenge (a 401 without one is not OAuth: it stays a plain failure).
 */
export const parseBearerChallenge = (header: string | ReadonlyArray<string> | undefined): BearerChallenge | undefined => {
  const text = Array.isArray(header) ? header.join(", ") : (header as string | undefined)
  if (text === undefined || text.length > MAX_CHALLENGE_CHARS) return undefined
  const match = /(?:^|,\s*)bearer(?:\s+|$)(.*)$/i.exec(text.trim())
  if (match === null) return undefined
  const params = new Map<string, string>()
  for (const m of (match[1] ?? "").matchAll(/([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))/g)) {
    const name = (m[1] as string).toLowerCase()
    if (!params.has(name)) params.set(name, m[2] !== undefined ? m[2].replace(/\\(.)/g, "$1") : (m[3] ?? ""))
  }
  return { resourceMetadataUrl: params.get("resource_metadata"), scope: params.get("scope"), error: params.get("error") }
}

/** The most an OAuth answer (metadata, registration, token) may hold; an error answer is cut at `OAUTH_ERROR_BYTES`. */
export const OAUTH_MAX_BYTES = 1024 * 1024
const OAUTH_ERROR_BYTES = 64 * 1024
/** How long one OAuth request (answer and body) may take. */
export const OAUTH_REQUEST_MS = 30_000

/**
 * The fetch of the SDK's OAuth requests (discovery, registration, token, refresh: `auth()`'s and
 * `refreshAuthorization`'s `fetchFn`): a hostile authorization server or metadata document is an
 * upstream like any other, so its host goes through the outbound policy, its answers are bounded
 * (src/mcp/bounded-fetch.ts: no redirect followed, a body over the limit fails) and each request
 * ends within `timeoutMs`.
 */
export const oauthFetch = (policy: UpstreamPolicy, limits: { readonly maxBytes?: number; readonly timeoutMs?: number } = {}): typeof fetch => {
  const bounded = boundedFetch({ maxMessageBytes: limits.maxBytes ?? OAUTH_MAX_BYTES, errorBodyBytes: OAUTH_ERROR_BYTES, onTooLarge: () => undefined, fetch: policy.fetch })
  const timeoutMs = limits.timeoutMs ?? OAUTH_REQUEST_MS
  return (input, init) => {
    const timeout = AbortSignal.timeout(timeoutMs)
    return bounded(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout })
  }
}

/**
 * `base` with the service's bearer token on every request (the SDK's SSE transport takes a fetch,
 * not our token source): a 401 with a bearer challenge asks `auth` for a new token and sends the
 * request once more, as the Streamable HTTP transport does; when only a user can help, the
 * `AuthorizationRequiredError` is thrown (and told to `onRequired`: the event source turns a
 * thrown fetch into a bare stream error). A 401 without a bearer challenge is passed on as it is.
 */
export const fetchWithAuth = (base: typeof fetch, auth: UpstreamAuth, onRequired: (error: AuthorizationRequiredError) => void): typeof fetch =>
  async (input, init) => {
    for (const last of [false, true]) {
      const token = await auth.accessToken()
      const headers = new Headers(init?.headers)
      if (token !== undefined) headers.set("authorization", `Bearer ${token}`)
      const response = await base(input, { ...init, headers })
      const challenge = response.status === 401 ? parseBearerChallenge(response.headers.get("www-authenticate") ?? undefined) : undefined
      if (challenge === undefined) return response
      await response.body?.cancel().catch(() => undefined)
      try {
        await auth.unauthorized(challenge, token, last)
      } catch (error) {
        if (error instanceof AuthorizationRequiredError) onRequired(error)
        throw error
      }
    }
    throw new Error("unreachable: the last unauthorized() rejects")
  }
