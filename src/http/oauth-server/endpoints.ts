/**
 * The HTTP face of the built-in authorization server (src/http/oauth-server/grants.ts), mounted
 * beside the contract when the store runs with `--auth-server`: RFC 8414 metadata, the JWKS, the
 * authorization endpoint and its consent page, the operator's decision, the token, revocation and
 * registration endpoints, and the admin route that approves a client ahead of time. Without
 * `--auth-server` each answers 404 saying how to turn it on.
 *
 * The OAuth endpoints answer in OAuth's words (`error`, `error_description`, RFC 6749 5.2); the
 * store's own JSON routes (consent, approve_client, clients, revoke_client) in the contract's error body. Every refusal is a
 * log line (grants.ts), never with a token, code or secret in it.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Option } from "effect"
import { log } from "../../logging/log.js"
import { currentPrincipal } from "../access.js"
import { errorBody, Forbidden, NotFound, Unavailable, validationError } from "../contract-errors.js"
import type { RouteEntry } from "../contract-middleware.js"
import { AddressBudget, addressKey, budgetAddress } from "./address-budget.js"
import { CONSENT_PAGE_POLICY, consentPage, plainPage } from "./consent-page.js"
import type { AuthorizationServer, OAuthErrorAnswer } from "./grants.js"

/**
 * The routes its clients reach without an API key (src/http/authorization.ts `OPEN_ROUTES`): each
 * checks its own proof (PKCE, client authentication).
 */
export const OAUTH_OPEN_ROUTES: ReadonlyArray<RouteEntry> = [
  { method: "GET", path: "/.well-known/oauth-authorization-server" },
  { method: "GET", path: "/oauth/jwks" },
  { method: "GET", path: "/oauth/authorize" },
  { method: "POST", path: "/oauth/token" },
  { method: "POST", path: "/oauth/revoke" },
  { method: "POST", path: "/oauth/register" }
]

/** Every route, for the contract middleware's 405 answers: the open ones, and the operator's (admin key). */
export const OAUTH_SERVER_ROUTES: ReadonlyArray<RouteEntry> = [
  ...OAUTH_OPEN_ROUTES,
  { method: "POST", path: "/oauth/consent" },
  { method: "POST", path: "/oauth/approve_client" },
  { method: "GET", path: "/oauth/clients" },
  { method: "POST", path: "/oauth/revoke_client" }
]

const NO_STORE = { "cache-control": "no-store", pragma: "no-cache", "referrer-policy": "no-referrer" }

const oauthAnswer = (e: OAuthErrorAnswer) =>
  HttpServerResponse.unsafeJson(
    { success: false, message: e.description, error: e.error, error_description: e.description },
    { status: e.status, headers: { ...NO_STORE, ...(e.status === 401 ? { "www-authenticate": 'Basic realm="mcp-store"' } : {}) } }
  )

const html = (status: number, body: string, policy = "default-src 'none'; frame-ancestors 'none'", headers: Record<string, string> = {}) =>
  HttpServerResponse.text(body, { status, contentType: "text/html; charset=utf-8", headers: { ...NO_STORE, ...headers, "content-security-policy": policy, "x-frame-options": "DENY" } })

/**
 * Requests a minute one client address may make of the open routes that keep something
 * (`AddressBudget`): an authorization request is one a browser makes now and then, a registration
 * one a client makes once.
 */
export const AUTHORIZE_PER_MINUTE = 30
export const REGISTER_PER_MINUTE = 10

/**
 * Spends one request of the caller's address from `budget`: undefined when allowed, else the
 * seconds to wait (the first refusal of a spell is a log line).
 */
const overBudget = (budget: AddressBudget, what: string) =>
  Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
    const forwarded = request.headers["x-forwarded-for"]
    const address = budgetAddress(Option.getOrElse(request.remoteAddress, () => "unknown"), typeof forwarded === "string" ? forwarded : undefined)
    const taken = budget.take(address)
    if (taken.allowed) return undefined
    if (taken.first) log.warn(`refused ${what} from ${addressKey(address)}: more than its budget a minute`, { event: "oauth_rate_limited", address: addressKey(address), route: what })
    return taken.retryAfterSeconds
  })

const off = HttpServerResponse.unsafeJson(errorBody("NOT_FOUND", "The built-in authorization server is off: start the store with --auth-server", {}), { status: 404 })

/** The form of a token or revocation request (read once by the body checks, src/http/contract-middleware.ts). */
const formOf = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
  Effect.map(Effect.orElseSucceed(request.text, () => ""), (text) => {
    const type = (request.headers["content-type"] ?? "").split(";", 1)[0]!.trim().toLowerCase()
    return { form: type === "application/x-www-form-urlencoded" ? new URLSearchParams(text) : undefined, authorization: request.headers["authorization"] }
  })
)

const formRequired = oauthAnswer({ status: 400, error: "invalid_request", description: "the body must be application/x-www-form-urlencoded" })

/** A JSON body's object (the body checks have parsed it), or undefined. */
const jsonOf = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => Effect.orElseSucceed(request.json, () => undefined as unknown))

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** `tools` of a JSON body: absent or null (every tool), or an array of globs. */
const toolsOf = (v: unknown): ReadonlyArray<string> | null | "bad" =>
  v === undefined || v === null ? null : Array.isArray(v) && v.every((t) => typeof t === "string") ? (v as ReadonlyArray<string>) : "bad"

/** 403 unless the request is an admin's. */
const adminOnly = (what: string) =>
  Effect.flatMap(currentPrincipal, (principal) => (principal.role === "admin" ? Effect.void : Effect.fail(new Forbidden(errorBody("FORBIDDEN", `Only an admin key may ${what}`, {})))))

/** The authorization server's state (Redis) could not be reached: 503, in the contract's body. */
const stateUnavailable = (e: OAuthErrorAnswer) => new Unavailable(errorBody("SERVICE_UNAVAILABLE", e.description, {}))

/** The routes, served by `server` (undefined: the store runs without `--auth-server`). */
export const oauthServerRoutes = (server: AuthorizationServer | undefined) =>
  HttpApiBuilder.Router.use((router) =>
    Effect.gen(function* () {
      const authorizeBudget = new AddressBudget(AUTHORIZE_PER_MINUTE)
      const registerBudget = new AddressBudget(REGISTER_PER_MINUTE)
      yield* router.get("/.well-known/oauth-authorization-server", Effect.sync(() => (server === undefined ? off : HttpServerResponse.unsafeJson(server.metadata(), { headers: { "cache-control": "max-age=300" } }))))
      yield* router.get("/oauth/jwks", Effect.sync(() => (server === undefined ? off : HttpServerResponse.unsafeJson(server.jwks, { headers: { "cache-control": "max-age=300" } }))))

      yield* router.get(
        "/oauth/authorize",
        Effect.gen(function* () {
          if (server === undefined) return off
          const wait = yield* overBudget(authorizeBudget, "authorization requests")
          if (wait !== undefined) return html(429, plainPage(`Too many authorization requests from your address: try again in ${wait} seconds.`), undefined, { "retry-after": String(wait) })
          const query = yield* HttpServerRequest.ParsedSearchParams
          const outcome = yield* Effect.promise(() => server.authorize(query))
          switch (outcome.kind) {
            case "page":
              return html(outcome.status, plainPage(outcome.message))
            case "redirect":
              return HttpServerResponse.empty({ status: 302, headers: { ...NO_STORE, location: outcome.location } })
            case "consent":
              return html(200, consentPage(outcome.consent), CONSENT_PAGE_POLICY)
          }
        })
      )

      // The operator's decision on the consent page: an admin key only (the route is not open, and
      // an agent or reader key is refused here as everywhere else store-wide).
      yield* router.post(
        "/oauth/consent",
        Effect.gen(function* () {
          if (server === undefined) return off
          yield* adminOnly("approve an OAuth client")
          const body = yield* jsonOf
          if (!isRecord(body)) return yield* Effect.fail(validationError("Invalid request: body", [{ field: "body", problem: "must be a JSON object with request_id and decision" }]))
          const requestId = body["request_id"]
          const decision = body["decision"]
          const tools = toolsOf(body["tools"])
          if (typeof requestId !== "string" || requestId.length > 100) return yield* Effect.fail(validationError("Invalid request: request_id", [{ field: "request_id", problem: "must be the consent page's request id" }]))
          if (decision !== "approve" && decision !== "deny") return yield* Effect.fail(validationError("Invalid request: decision", [{ field: "decision", problem: "must be approve or deny" }]))
          if (tools === "bad") return yield* Effect.fail(validationError("Invalid request: tools", [{ field: "tools", problem: "must be null or an array of glob strings" }]))
          const decided = yield* Effect.promise(() => server.decide(requestId, decision === "approve", tools))
          if ("error" in decided && decided.status === 503) return yield* Effect.fail(stateUnavailable(decided))
          if ("error" in decided) {
            return HttpServerResponse.unsafeJson(errorBody(decided.status === 404 ? "NOT_FOUND" : "VALIDATION_ERROR", decided.description, {}), { status: decided.status === 404 ? 404 : 400 })
          }
          return HttpServerResponse.unsafeJson({ success: true, location: decided.location }, { headers: NO_STORE })
        })
      )

      yield* router.post(
        "/oauth/token",
        Effect.gen(function* () {
          if (server === undefined) return off
          const { form, authorization } = yield* formOf
          if (form === undefined) return formRequired
          const answer = yield* Effect.promise(() => server.token(form, authorization))
          return answer.status === 200 ? HttpServerResponse.unsafeJson(answer.body, { headers: NO_STORE }) : oauthAnswer(answer)
        })
      )

      yield* router.post(
        "/oauth/revoke",
        Effect.gen(function* () {
          if (server === undefined) return off
          const { form, authorization } = yield* formOf
          if (form === undefined) return formRequired
          const answer = yield* Effect.promise(() => server.revoke(form, authorization))
          return answer.status === 200 ? HttpServerResponse.empty({ status: 200, headers: NO_STORE }) : oauthAnswer(answer)
        })
      )

      yield* router.post(
        "/oauth/register",
        Effect.gen(function* () {
          if (server === undefined) return off
          const wait = yield* overBudget(registerBudget, "client registrations")
          if (wait !== undefined) {
            const description = `too many client registrations from your address: try again in ${wait} seconds`
            return HttpServerResponse.unsafeJson(
              { success: false, message: description, error: "temporarily_unavailable", error_description: description },
              { status: 429, headers: { ...NO_STORE, "retry-after": String(wait) } }
            )
          }
          const body = yield* jsonOf
          const answer = yield* Effect.promise(() => server.register(body))
          return answer.status === 201 ? HttpServerResponse.unsafeJson(answer.body, { status: 201, headers: NO_STORE }) : oauthAnswer(answer)
        })
      )

      // An operator approves a client ahead of time (admin key): the flow then completes without the page.
      yield* router.post(
        "/oauth/approve_client",
        Effect.gen(function* () {
          if (server === undefined) return off
          yield* adminOnly("approve an OAuth client")
          const body = yield* jsonOf
          if (!isRecord(body)) return yield* Effect.fail(validationError("Invalid request: body", [{ field: "body", problem: "must be a JSON object with client_id and agent_id" }]))
          const clientId = body["client_id"]
          const agent = body["agent_id"]
          const tools = toolsOf(body["tools"])
          const machine = body["machine"] ?? false
          const fields: Array<{ field: string; problem: string }> = []
          if (typeof clientId !== "string") fields.push({ field: "client_id", problem: "must be the client's id (its metadata document's https URL)" })
          if (typeof agent !== "string") fields.push({ field: "agent_id", problem: "must be the agent the client acts for" })
          if (tools === "bad") fields.push({ field: "tools", problem: "must be null or an array of glob strings" })
          if (typeof machine !== "boolean") fields.push({ field: "machine", problem: "must be true or false" })
          if (fields.length > 0) return yield* Effect.fail(validationError(`Invalid request: ${fields.map((f) => f.field).join(", ")}`, fields))
          const approved = yield* Effect.promise(() => server.approve({ clientId: clientId as string, agent: agent as string, tools: tools as ReadonlyArray<string> | null, machine: machine as boolean, by: "api" }))
          if ("error" in approved && approved.status === 503) return yield* Effect.fail(stateUnavailable(approved))
          if ("error" in approved) return yield* Effect.fail(validationError(`Invalid request: ${approved.description}`, [{ field: "client_id", problem: approved.description }]))
          return HttpServerResponse.unsafeJson(
            { success: true, client_id: clientId, agent_id: agent, ...(approved.secret === undefined ? {} : { client_secret: approved.secret }) },
            { headers: NO_STORE }
          )
        })
      )

      // The approved clients (admin key): what `mcp-store auth list-clients` shows, never a secret.
      yield* router.get(
        "/oauth/clients",
        Effect.gen(function* () {
          if (server === undefined) return off
          yield* adminOnly("list the OAuth clients")
          const clients = yield* Effect.promise(() => server.clients())
          if ("error" in clients) return yield* Effect.fail(stateUnavailable(clients))
          return HttpServerResponse.unsafeJson(
            {
              success: true,
              clients: clients.map(([id, c]) => ({ client_id: id, agent_id: c.agent, tools: c.tools, machine: c.machine, has_secret: c.secret_sha256 !== null, approved: c.approved, approved_by: c.approved_by }))
            },
            { headers: NO_STORE }
          )
        })
      )

      // An operator withdraws a client's approval (admin key): its refresh tokens' families are revoked.
      yield* router.post(
        "/oauth/revoke_client",
        Effect.gen(function* () {
          if (server === undefined) return off
          yield* adminOnly("revoke an OAuth client")
          const body = yield* jsonOf
          const clientId = isRecord(body) ? body["client_id"] : undefined
          if (typeof clientId !== "string" || clientId === "" || clientId.length > 2048) {
            return yield* Effect.fail(validationError("Invalid request: client_id", [{ field: "client_id", problem: "must be the id of an approved client" }]))
          }
          const withdrawn = yield* Effect.promise(() => server.withdraw(clientId))
          if (withdrawn !== undefined && "error" in withdrawn) return yield* Effect.fail(stateUnavailable(withdrawn))
          if (withdrawn === undefined) return yield* Effect.fail(new NotFound(errorBody("NOT_FOUND", `No approved OAuth client ${clientId.slice(0, 200)}`, {})))
          return HttpServerResponse.unsafeJson({ success: true, client_id: clientId, families_revoked: withdrawn.families }, { headers: NO_STORE })
        })
      )
    })
  )
