/**
 * Who may use the API (README, Security): with `--api-key`, `MCPSTORE_API_KEY_FILE` or a key in the
 * keys file (src/config/api-keys.ts), every request but GET /health, GET /ui, GET /docs and GET
 * /openapi.json needs `Authorization: Bearer <key>`, and is answered 401 UNAUTHORIZED with a
 * `WWW-Authenticate` challenge without it; with no key every route is open. A key's role decides
 * what it reaches (src/http/access.ts): a route outside it is answered 403 FORBIDDEN. The request's
 * principal is provided to every handler as `PrincipalTag`. Every refusal is a log line (never a key).
 *
 * With `--auth-issuer` or `--auth-server` the store is also an OAuth protected resource (src/http/oauth-resource/): a bearer
 * credential that is no key but a JWT is an access token, checked by `ProtectedResource` (issuer,
 * signature, audience, expiry), its claims the principal; then its role (as a key's) and its scope
 * (src/http/oauth-resource/scopes.ts: 403 with `error="insufficient_scope"`). Every route then needs
 * a key or a token, keys file or not, and every 401 points at the protected resource metadata.
 *
 * It is the contract's bearer security (the OpenAPI document's `bearer` scheme), applied to the
 * whole HttpApi (src/http/Api.ts). HttpApiBuilder runs an API-level middleware around the router
 * itself, before any route is looked up, so this one check also guards the routes mounted beside
 * the contract (/events, /mcp, /metrics, /inspect/*, /ui, /docs, /openapi.json) and paths with no
 * route: a request without the key gets 401, never a 404, 405, 413 or 415 that would tell it more.
 */
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as OpenApi from "@effect/platform/OpenApi"
import { Effect, Layer, type Redacted, Schema } from "effect"
import type { KeyRing } from "../config/api-keys.js"
import { log } from "../logging/log.js"
import { ADMIN, currentPrincipal, PrincipalTag, routeAccess, type Principal } from "./access.js"
import { pathOf, type RouteEntry } from "./contract-middleware.js"
import { errorBody, Forbidden, Unauthorized } from "./contract-errors.js"
import { METADATA_PATH, ProtectedResourceTag, type ProtectedResource } from "./oauth-resource/protected-resource.js"
import { looksLikeJwt, looksLikeOpaque } from "./oauth-resource/token-verifier.js"
import { OAUTH_OPEN_ROUTES } from "./oauth-server/endpoints.js"

/**
 * The routes that need no key: GET /health is for liveness probes; GET /ui is a static page that
 * asks for the key itself; GET /docs and GET /openapi.json are the static description of the API
 * (the docs page's calls carry the key given to its Authorize button). The request guard (Host,
 * Origin) applies to them as to every route.
 */
export const OPEN_ROUTES: ReadonlyArray<RouteEntry> = [
  { method: "GET", path: "/health" },
  { method: "GET", path: "/ui" },
  { method: "GET", path: "/docs" },
  { method: "GET", path: "/openapi.json" },
  // The browser comes back from an OAuth authorization server with no key; the single-use state is the
  // proof (a principal's own authorization asks first, and its answer is a POST of the same form).
  { method: "GET", path: "/oauth/callback" },
  { method: "POST", path: "/oauth/callback" },
  // The built-in authorization server's: its clients have no API key.
  ...OAUTH_OPEN_ROUTES
]

/** The API key check of every request (the contract's `bearer` security). */
export class Authorization extends HttpApiMiddleware.Tag<Authorization>()("mcp-store/Authorization", {
  failure: Schema.Union(Unauthorized, Forbidden),
  provides: PrincipalTag,
  security: {
    bearer: HttpApiSecurity.annotate(
      HttpApiSecurity.bearer,
      OpenApi.Description,
      "An API key: --api-key (admin), or one made by `mcp-store keys create` (admin, agent or reader); or, with --auth-issuer, an OAuth access token (a JWT) for this store. Needed only when the server has a key or trusts an authorization server; GET /health, /ui, /docs, /openapi.json and /.well-known/oauth-protected-resource never need it."
    )
  }
}) {}

/** The challenge of a store that takes keys only. */
const KEY_CHALLENGE = 'Bearer realm="mcp-store"'

/**
 * A 401 names the scheme it wants (RFC 9110, 11.6.1), and a 403 for a missing scope the scope
 * (RFC 6750, 3.1); set as the response is written.
 */
const challenge = (value: string) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(response.status === 401 || response.status === 403 ? HttpServerResponse.setHeader(response, "www-authenticate", value) : response)
  )

/** Whether a request needs no credentials: an open route, or a GET of the protected resource metadata. */
const isOpen = (method: string, path: string): boolean =>
  OPEN_ROUTES.some((route) => route.method === method && route.path === path) || (method === "GET" && (path === METADATA_PATH || path.startsWith(`${METADATA_PATH}/`)))

/** The principal of an open route's request without a valid key: it reads static pages only. */
const ANONYMOUS: Principal = { role: "reader" }

/**
 * The principal a request acts as, or why it is refused: 401 (no key, an unknown, revoked or
 * expired key) or 403 (a route outside the key's role); or, when the store trusts an authorization
 * server (`resource` enabled), the bearer token that no key matches (a JWT, or an opaque token
 * when the issuer introspects them), for `checkToken`. Shared by the
 * middleware and the direct call route (src/http/call-route.ts), which leaves a token to HttpApi.
 */
export const authorize = (
  ring: KeyRing | undefined,
  method: string,
  url: string,
  header: string | undefined,
  quiet = false,
  resource?: ProtectedResource
): { readonly principal: Principal } | { readonly status: 401 | 403; readonly message: string; readonly challenge?: string } | { readonly token: string } => {
  const tokens = resource?.enabled === true
  if (ring === undefined || (!ring.required && !tokens)) return { principal: ADMIN }
  const path = pathOf(url)
  const checked = ring.check(header)
  if (isOpen(method, path)) return { principal: checked.ok ? checked.principal : ANONYMOUS }
  if (!checked.ok) {
    const credential = header !== undefined && /^bearer /i.test(header) ? header.slice("Bearer ".length).trim() : ""
    // A bearer no key matches is a token's to check: a JWT, or an opaque token when an issuer introspects
    // them (an API key's shape never is: a mistyped key is still told so).
    if (tokens && checked.why === "unknown" && (looksLikeJwt(credential) || (resource.introspects && looksLikeOpaque(credential) && !credential.startsWith("mcps_")))) return { token: credential }
    if (!quiet) log.warn(`refused ${method} ${path}: ${checked.why === "missing" ? "no API key" : `${checked.why} API key`}`, { event: "auth_refused", method, path, why: checked.why })
    return {
      status: 401,
      message: checked.why === "revoked" || checked.why === "expired" ? `The API key is ${checked.why}` : `Missing or wrong API key${tokens ? " or access token" : ""}: send 'Authorization: Bearer <key>'`,
      ...(tokens ? { challenge: resource.challenge(method, path) } : {})
    }
  }
  const denied = routeAccess(checked.principal, method, path)
  if (denied !== undefined) {
    if (!quiet) log.warn(`refused ${method} ${path} to key '${checked.label}' (${checked.principal.role}): ${denied}`, { event: "forbidden", method, path, key: checked.label, role: checked.principal.role })
    return { status: 403, message: denied }
  }
  return { principal: checked.principal }
}

/**
 * The principal of an access token, or why it is refused: 401 with `error="invalid_token"` (not for
 * this store, expired, badly signed, no principal in its claims), 403 outside its role, 403 with
 * `error="insufficient_scope"` without the route's scope. Each refusal is a log line naming who the
 * token is for when it was valid, never the token.
 */
export const checkToken = async (
  resource: ProtectedResource,
  method: string,
  url: string,
  token: string
): Promise<{ readonly principal: Principal } | { readonly status: 401 | 403; readonly message: string; readonly challenge?: string }> => {
  const path = pathOf(url)
  const checked = await resource.verify(token, path)
  if (!checked.ok) {
    const detail = checked.detail === undefined ? "" : ` (${checked.detail.slice(0, 300)})`
    const line = `refused ${method} ${path}: access token refused (${checked.why}): ${checked.message}${detail}`
    if (checked.why === "unavailable") log.error(line, { event: "auth_refused", method, path, why: `token_${checked.why}` })
    else log.warn(line, { event: "auth_refused", method, path, why: `token_${checked.why}` })
    return { status: 401, message: checked.message, challenge: resource.challenge(method, path, { error: "invalid_token", description: checked.message }) }
  }
  const denied = routeAccess(checked.principal, method, path)
  if (denied !== undefined) {
    log.warn(`refused ${method} ${path} to ${checked.label} (${checked.principal.role}): ${denied}`, { event: "forbidden", method, path, token: checked.label, role: checked.principal.role })
    return { status: 403, message: denied }
  }
  const missing = resource.missingScope(checked.scopes, method, path)
  if (missing !== undefined) {
    const message = `insufficient_scope: this route needs the scope '${missing}', which the access token was not granted`
    log.warn(`refused ${method} ${path} to ${checked.label}: ${message}`, { event: "forbidden", method, path, token: checked.label, why: "insufficient_scope", scope: missing })
    return { status: 403, message, challenge: resource.challenge(method, path, { error: "insufficient_scope", description: message }, missing) }
  }
  return { principal: checked.principal }
}

/** The middleware's check: the principal, or 401 with the challenge, or 403. */
const bearerCheck = (ring: KeyRing, resource: ProtectedResource) => (_token: Redacted.Redacted<string>): Effect.Effect<Principal, Unauthorized | Forbidden, HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request): Effect.Effect<Principal, Unauthorized | Forbidden> => {
    const first = authorize(ring, request.method, request.url, request.headers["authorization"], false, resource)
    const answer = (result: Exclude<typeof first, { readonly token: string }>): Effect.Effect<Principal, Unauthorized | Forbidden> => {
      if ("principal" in result) return Effect.succeed(result.principal)
      const refused = result.status === 403 ? new Forbidden(errorBody("FORBIDDEN", result.message, {})) : new Unauthorized(errorBody("UNAUTHORIZED", result.message, {}))
      const header = result.challenge ?? (result.status === 401 ? KEY_CHALLENGE : undefined)
      return header === undefined ? Effect.fail(refused) : Effect.zipRight(challenge(header), Effect.fail(refused))
    }
    if (!("token" in first)) return answer(first)
    return Effect.flatMap(
      Effect.promise(() => checkToken(resource, request.method, request.url, first.token)),
      answer
    )
  })

/**
 * The check of the keys in `ring` and of the access tokens of the store's protected resource; with
 * no key and no trusted authorization server, every request is admitted as an admin.
 */
export const authorizationLayer = (ring: KeyRing | undefined): Layer.Layer<Authorization, never, ProtectedResourceTag> =>
  Layer.effect(
    Authorization,
    Effect.map(ProtectedResourceTag, (resource) => Authorization.of({ bearer: ring === undefined ? () => Effect.succeed(ADMIN) : bearerCheck(ring, resource) }))
  )

/**
 * Whether a principal is allowed everything: clear secrets (`show_mcpconfig?reveal=true`) and
 * probing any URL (`network_check` naming a URL that no service of the scope has).
 */
export const allowedEverything = (principal: Principal): boolean => principal.role === "admin"

/** Whether the request being handled is allowed everything (`allowedEverything` of its principal). */
export const requestAllowedEverything: Effect.Effect<boolean> = Effect.map(currentPrincipal, allowedEverything)
