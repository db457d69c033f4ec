/**
 * Who may use the API (README, Security): with `--api-key`, `MCPSTORE_API_KEY_FILE` or a key in the
 * keys file (src/config/api-keys.ts), every request but GET /health, GET /ui, GET /docs and GET
 * /openapi.json needs `Authorization: Bearer <key>`, and is answered 401 UNAUTHORIZED with a
 * `WWW-Authenticate` challenge without it; with no key every route is open. A key's role decides
 * what it reaches (src/http/access.ts): a route outside it is answered 403 FORBIDDEN. The request's
 * principal is provided to every handler as `PrincipalTag`. Every refusal is a log line (never a key).
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
  // The browser comes back from an OAuth authorization server with no key; the single-use state is the proof.
  { method: "GET", path: "/oauth/callback" },
  // The built-in authorization server (src/http/oauth-server/endpoints.ts): its clients have no API key;
  // each endpoint checks its own proof (PKCE, client authentication, the admin key on the consent).
  { method: "GET", path: "/.well-known/oauth-authorization-server" },
  { method: "GET", path: "/oauth/jwks" },
  { method: "GET", path: "/oauth/authorize" },
  { method: "POST", path: "/oauth/token" },
  { method: "POST", path: "/oauth/revoke" },
  { method: "POST", path: "/oauth/register" }
]

/** The API key check of every request (the contract's `bearer` security). */
export class Authorization extends HttpApiMiddleware.Tag<Authorization>()("mcp-store/Authorization", {
  failure: Schema.Union(Unauthorized, Forbidden),
  provides: PrincipalTag,
  security: {
    bearer: HttpApiSecurity.annotate(
      HttpApiSecurity.bearer,
      OpenApi.Description,
      "An API key: --api-key (admin), or one made by `mcp-store keys create` (admin, agent or reader). Needed only when the server has a key; GET /health, /ui, /docs and /openapi.json never need it."
    )
  }
}) {}

/** A 401 names the scheme it wants (RFC 9110, 11.6.1); set as the response is written. */
const challenge = HttpApp.appendPreResponseHandler((_request, response) =>
  Effect.succeed(response.status === 401 ? HttpServerResponse.setHeader(response, "www-authenticate", 'Bearer realm="mcp-store"') : response)
)

/** The principal of an open route's request without a valid key: it reads static pages only. */
const ANONYMOUS: Principal = { role: "reader" }

/**
 * The principal a request acts as, or why it is refused: 401 (no key, an unknown, revoked or
 * expired key) or 403 (a route outside the key's role). Shared by the middleware and the direct
 * call route (src/http/call-route.ts).
 */
export const authorize = (
  ring: KeyRing | undefined,
  method: string,
  url: string,
  header: string | undefined,
  quiet = false
): { readonly principal: Principal } | { readonly status: 401 | 403; readonly message: string } => {
  if (ring === undefined || !ring.required) return { principal: ADMIN }
  const path = pathOf(url)
  const checked = ring.check(header)
  if (OPEN_ROUTES.some((route) => route.method === method && route.path === path)) return { principal: checked.ok ? checked.principal : ANONYMOUS }
  if (!checked.ok) {
    if (!quiet) log.warn(`refused ${method} ${path}: ${checked.why === "missing" ? "no API key" : `${checked.why} API key`}`, { event: "auth_refused", method, path, why: checked.why })
    return { status: 401, message: checked.why === "revoked" || checked.why === "expired" ? `The API key is ${checked.why}` : "Missing or wrong API key: send 'Authorization: Bearer <key>'" }
  }
  const denied = routeAccess(checked.principal, method, path)
  if (denied !== undefined) {
    if (!quiet) log.warn(`refused ${method} ${path} to key '${checked.label}' (${checked.principal.role}): ${denied}`, { event: "forbidden", method, path, key: checked.label, role: checked.principal.role })
    return { status: 403, message: denied }
  }
  return { principal: checked.principal }
}

/**
 * The principal of a bearer token that is not an API key (the built-in authorization server's
 * access tokens, src/http/oauth-server/grants.ts `principalOf`), for the request's path; undefined
 * when it is none.
 */
export type TokenPrincipals = (token: string, path: string) => Promise<Principal | undefined>

/** The middleware's check: the principal, or 401 with the challenge, or 403. */
const bearerCheck = (ring: KeyRing, tokens: TokenPrincipals | undefined) => (_token: Redacted.Redacted<string>): Effect.Effect<Principal, Unauthorized | Forbidden, HttpServerRequest.HttpServerRequest> =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request): Effect.Effect<Principal, Unauthorized | Forbidden> => {
    const header = request.headers["authorization"]
    // Glue until the resource server's issuer-list verifier: a JWT (three dot-separated parts) on an
    // agent's MCP endpoint is tried as one of the built-in authorization server's access tokens.
    const path = pathOf(request.url)
    const jwt = tokens !== undefined && header !== undefined && /^bearer [\w-]+\.[\w-]+\.[\w-]+$/i.test(header) && /^\/for_agent\/[^/]+\/mcp$/.test(path)
    const result = authorize(ring, request.method, request.url, header, jwt)
    if ("principal" in result) return Effect.succeed(result.principal)
    const refuse = (r: { readonly status: 401 | 403; readonly message: string }): Effect.Effect<never, Unauthorized | Forbidden> =>
      r.status === 403 ? Effect.fail(new Forbidden(errorBody("FORBIDDEN", r.message, {}))) : Effect.zipRight(challenge, Effect.fail(new Unauthorized(errorBody("UNAUTHORIZED", r.message, {}))))
    if (!jwt || result.status !== 401) return refuse(result)
    return Effect.flatMap(Effect.promise(() => tokens(header.slice(7).trim(), path)), (principal) => {
      if (principal === undefined) {
        log.warn(`refused ${request.method} ${path}: an access token that is not valid here (expired, revoked, or for another endpoint)`, { event: "auth_refused", method: request.method, path, why: "token" })
        return refuse({ status: 401, message: "The access token is not valid for this endpoint (expired, revoked or for another resource)" })
      }
      const denied = routeAccess(principal, request.method, path)
      if (denied !== undefined) {
        log.warn(`refused ${request.method} ${path} to an OAuth access token: ${denied}`, { event: "forbidden", method: request.method, path, role: principal.role })
        return refuse({ status: 403, message: denied })
      }
      return Effect.succeed(principal)
    })
  })

/**
 * The check of the keys in `ring` (and, with `tokens`, of the built-in authorization server's
 * access tokens on the agents' MCP endpoints); with no ring, every request is admitted as an admin.
 */
export const authorizationLayer = (ring: KeyRing | undefined, tokens?: TokenPrincipals): Layer.Layer<Authorization> =>
  Layer.succeed(Authorization, Authorization.of({ bearer: ring === undefined ? () => Effect.succeed(ADMIN) : bearerCheck(ring, tokens) }))

/**
 * Whether a principal is allowed everything: clear secrets (`show_mcpconfig?reveal=true`) and
 * probing any URL (`network_check` naming a URL that no service of the scope has).
 */
export const allowedEverything = (principal: Principal): boolean => principal.role === "admin"

/** Whether the request being handled is allowed everything (`allowedEverything` of its principal). */
export const requestAllowedEverything: Effect.Effect<boolean> = Effect.map(currentPrincipal, allowedEverything)
