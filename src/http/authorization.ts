/**
 * Who may use the API (README, Security): with `--api-key`, every request but GET /health, GET /ui,
 * GET /docs and GET /openapi.json needs `Authorization: Bearer <key>`, and is answered 401 UNAUTHORIZED with a
 * `WWW-Authenticate` challenge without it; with no key every route is open.
 *
 * It is the contract's bearer security (the OpenAPI document's `bearer` scheme), applied to the
 * whole HttpApi (src/http/Api.ts). HttpApiBuilder runs an API-level middleware around the router
 * itself, before any route is looked up, so this one check also guards the routes mounted beside
 * the contract (/events, /mcp, /metrics, /inspect/*, /ui, /docs, /openapi.json) and paths with no
 * route: a request without the key gets 401, never a 404, 405, 413 or 415 that would tell it more.
 */
import { HttpApiMiddleware, HttpApiSecurity, HttpApp, HttpServerRequest, HttpServerResponse, OpenApi } from "@effect/platform"
import { Effect, Layer, Redacted } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import { pathOf, type RouteEntry } from "./contract-middleware.js"
import { errorBody, Unauthorized } from "./errors.js"

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
  { method: "GET", path: "/openapi.json" }
]

const isOpen = (request: HttpServerRequest.HttpServerRequest): boolean => {
  if (request.method !== "GET") return false
  const path = pathOf(request.url)
  return OPEN_ROUTES.some((route) => route.path === path)
}

/** The API key check of every request (the contract's `bearer` security). */
export class Authorization extends HttpApiMiddleware.Tag<Authorization>()("mcp-store/Authorization", {
  failure: Unauthorized,
  security: {
    bearer: HttpApiSecurity.annotate(
      HttpApiSecurity.bearer,
      OpenApi.Description,
      "The server's --api-key. Needed only when the server was started with one; GET /health, /ui, /docs and /openapi.json never need it."
    )
  }
}) {}

/** A 401 names the scheme it wants (RFC 9110, 11.6.1); set as the response is written. */
const challenge = HttpApp.appendPreResponseHandler((_request, response) =>
  Effect.succeed(response.status === 401 ? HttpServerResponse.setHeader(response, "www-authenticate", 'Bearer realm="mcp-store"') : response)
)

const refused = Effect.zipRight(
  challenge,
  Effect.fail(new Unauthorized(errorBody("UNAUTHORIZED", "Missing or wrong API key: send 'Authorization: Bearer <key>'", {})))
)

const digest = (text: string): Buffer => createHash("sha256").update(text).digest()

/**
 * Whether an Authorization header presents the key: `Bearer <key>`, the scheme in any case (RFC
 * 9110), the token (the header past "Bearer ", as HttpApiBuilder takes it) compared in constant
 * time, as hashes of equal length. Shared by the middleware and the direct call route
 * (src/http/call-route.ts).
 */
export const presentsKey = (apiKey: string): ((header: string | undefined) => boolean) => {
  const expected = digest(apiKey)
  return (header) => {
    const presented = header !== undefined && /^bearer /i.test(header) ? header.slice("Bearer ".length) : ""
    return timingSafeEqual(digest(presented), expected)
  }
}

/** Admits a request that presents the key, and the open routes. */
const bearerCheck = (apiKey: Redacted.Redacted<string>) => {
  const admits = presentsKey(Redacted.value(apiKey))
  return (_token: Redacted.Redacted<string>): Effect.Effect<void, Unauthorized, HttpServerRequest.HttpServerRequest> =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
      isOpen(request) || admits(request.headers["authorization"]) ? Effect.void : refused
    )
}

/** The check for `apiKey`; with none, every request is admitted. */
export const authorizationLayer = (apiKey: string | undefined): Layer.Layer<Authorization> =>
  Layer.succeed(Authorization, Authorization.of({ bearer: apiKey === undefined ? () => Effect.void : bearerCheck(Redacted.make(apiKey)) }))

/**
 * Who a request is, as far as the API's powers go. Today every admitted request is the admin (the
 * one `--api-key`, or no key at all): this is the single place where a request is given a principal,
 * so that keys with roles plug in here and every check below follows.
 */
export interface Principal {
  readonly role: "admin"
}

export const principalOf = (_request: HttpServerRequest.HttpServerRequest): Principal => ({ role: "admin" })

/**
 * Whether a principal is allowed everything: clear secrets (`show_mcpconfig?reveal=true`) and
 * probing any URL (`network_check` naming a URL that no service of the scope has).
 */
export const allowedEverything = (principal: Principal): boolean => principal.role === "admin"

/** Whether the request being handled is allowed everything (`allowedEverything` of its principal). */
export const requestAllowedEverything: Effect.Effect<boolean, never, HttpServerRequest.HttpServerRequest> = Effect.map(
  HttpServerRequest.HttpServerRequest,
  (request) => allowedEverything(principalOf(request))
)
