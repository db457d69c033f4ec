/**
 * What the transports know of an OAuth-protected upstream (the MCP authorization spec): a bearer
 * token to send, and what to do when the server answers 401 with a `WWW-Authenticate: Bearer`
 * challenge. The flows themselves (discovery, registration, PKCE, refresh, the encrypted tokens)
 * are the runtime's (src/runtime/oauth.ts, on the SDK's client auth); the transports only see this
 * interface, so a token never passes through anything but a request header.
 */

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
