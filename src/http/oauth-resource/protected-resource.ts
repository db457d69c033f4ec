/**
 * The store as an OAuth 2.1 protected resource (MCP authorization; RFC 9728, RFC 8707): which
 * resource a request is for, the protected resource metadata that describes it (its authorization
 * servers and scopes), the `WWW-Authenticate` challenges that point clients at that metadata, and the
 * check of a request's access token against it. The authorization middleware (src/http/authorization.ts)
 * asks it; the metadata routes (src/http/extras.ts) serve its documents.
 *
 * Resources: each MCP endpoint is its own (`<public URL>/mcp`, `<public URL>/for_agent/{agent_id}/mcp`),
 * and the store as a whole is `<public URL>` (every other route). A token for the store is accepted on
 * every route; a token for one endpoint on that endpoint only. The public URL is `--public-url` (the
 * store behind a proxy), else the URL the store listens at.
 */
import { Context } from "effect"
import type { Principal } from "../../config/api-keys.js"
import { grants, scopeNeeded, SCOPES_SUPPORTED, type StoreScope } from "./scopes.js"
import type { TokenCheck, TokenVerifier } from "./token-verifier.js"

/** Where the protected resource metadata is served (RFC 9728), before the resource's path. */
export const METADATA_PATH = "/.well-known/oauth-protected-resource"

/** The resource path of a request path: an MCP endpoint's own, or "" (the store as a whole). */
export const resourcePathOf = (path: string): string => {
  if (path === "/mcp") return path
  const m = /^\/for_agent\/([^/]+)\/mcp$/.exec(path)
  return m === null ? "" : path
}

/** The protected resource metadata document (RFC 9728, section 2). */
export interface ResourceMetadata {
  readonly resource: string
  readonly authorization_servers: ReadonlyArray<string>
  readonly scopes_supported: ReadonlyArray<string>
  readonly bearer_methods_supported: ReadonlyArray<string>
  readonly resource_name: string
}

/** A token's outcome for one request: the principal and its scopes, or the refusal with its challenge. */
export type TokenOutcome =
  | { readonly ok: true; readonly principal: Principal; readonly scopes: ReadonlySet<string>; readonly label: string }
  | (TokenCheck & { readonly ok: false })

/** A challenge's `error` (RFC 6750, section 3.1). */
export interface ChallengeError {
  readonly error: "invalid_token" | "insufficient_scope"
  readonly description: string
}

/** Text safe inside a quoted-string of a header: no quote, backslash or control character. */
const quotable = (text: string): string => text.replace(/["\\\u0000-\u001f\u007f]/g, "'").slice(0, 300)

export class ProtectedResource {
  constructor(
    /** The store's public base URL, no trailing slash (read per request: the port is known once listening). */
    readonly publicBase: () => string,
    readonly verifier: TokenVerifier
  ) {}

  /** Whether the store accepts access tokens at all (it trusts an authorization server). */
  get enabled(): boolean {
    return this.verifier.issuers.length > 0
  }

  /** Whether opaque access tokens are accepted too (an issuer introspects them). */
  get introspects(): boolean {
    return this.verifier.introspects
  }

  /** The resource URI of a resource path. */
  resourceUri(resourcePath: string): string {
    return `${this.publicBase()}${resourcePath}`
  }

  /** Where the metadata of a resource path is (RFC 9728, section 3.1: the well-known part after the origin). */
  metadataUrl(resourcePath: string): string {
    const base = new URL(this.publicBase())
    const prefix = base.pathname === "/" ? "" : base.pathname.replace(/\/$/, "")
    return `${base.origin}${METADATA_PATH}${prefix}${resourcePath}`
  }

  /** The metadata document of a resource path. */
  metadata(resourcePath: string): ResourceMetadata {
    return {
      resource: this.resourceUri(resourcePath),
      authorization_servers: this.verifier.issuers,
      scopes_supported: SCOPES_SUPPORTED,
      bearer_methods_supported: ["header"],
      resource_name: resourcePath === "" ? "mcp-store" : `mcp-store ${resourcePath}`
    }
  }

  /** The audiences a token may name for a request to `path`: the store, or the request's own endpoint (a trailing slash is no other resource). */
  audiences(path: string): ReadonlyArray<string> {
    const base = this.publicBase()
    const own = resourcePathOf(path)
    return own === "" ? [base] : [base, `${base}${own}`]
  }

  /** The `WWW-Authenticate` value of a refused request to `path` (RFC 6750, RFC 9728 section 5.1). */
  challenge(method: string, path: string, error?: ChallengeError, scope: StoreScope = scopeNeeded(method, path)): string {
    const parts = ['Bearer realm="mcp-store"']
    if (error !== undefined) parts.push(`error="${error.error}"`, `error_description="${quotable(error.description)}"`)
    parts.push(`resource_metadata="${this.metadataUrl(resourcePathOf(path))}"`, `scope="${scope}"`)
    return parts.join(", ")
  }

  /** Checks a request's token: valid for this resource, its claims a principal. */
  async verify(token: string, path: string): Promise<TokenOutcome> {
    return this.verifier.verify(token, this.audiences(path))
  }

  /** The scope a request needs that a token's grant lacks, or undefined when it holds it. */
  missingScope(scopes: ReadonlySet<string>, method: string, path: string): StoreScope | undefined {
    const needed = scopeNeeded(method, path)
    return grants(scopes, needed) ? undefined : needed
  }
}

/** The store's protected resource, for the metadata routes and the authorization middleware. */
export class ProtectedResourceTag extends Context.Tag("mcp-store/ProtectedResource")<ProtectedResourceTag, ProtectedResource>() {}
