/**
 * The routes beyond the 56 (docs/api.md, "Beyond the contract"), mounted on the same router and
 * behind the same API-level middleware (API key, body checks, errors; src/http/Api.ts): the live
 * event stream, Prometheus metrics, actor inspection, the MCP endpoint, the dashboard and the OAuth
 * protected resource metadata (src/http/oauth-resource/protected-resource.ts). Their
 * resources (metrics registry, MCP sessions) are scoped to the server and released when it stops.
 *
 * The long-lived ones are capped: `/events` and `/inspect/events` streams together
 * (`maxEventStreams`) and MCP sessions (`maxMcpSessions`, closed after `mcpSessionIdleSeconds`
 * idle). A request past a cap is answered 429 TOO_MANY with Retry-After.
 *
 * The MCP endpoint's faces are built here, given the operations they run (the `Calls` and `Catalog`
 * services) taken from the layer graph once.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as OpenApi from "@effect/platform/OpenApi"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Effect, Schedule, Scope as EffectScope, Stream } from "effect"
import type { IncomingMessage, ServerResponse } from "node:http"
import { Gauge } from "prom-client"
import { agentIdProblem, agentScope, scopeLabel, STORE_SCOPE, type Scope } from "../domain/service-definition.js"
import type { MonitorEvent } from "../monitoring/monitor.js"
import { inspectionSummary, liveActors, machineDefinitions } from "../runtime/inspect.js"
import { callableName, toolViewsFor } from "../runtime/service-views.js"
import { Api } from "./Api.js"
import { App, type AppState } from "./context.js"
import { ActorSystemService, ApprovalsService, AsyncCallsService } from "../runtime/store-parts.js"
import type { RouteEntry } from "./contract-middleware.js"
import { callerWords, currentPrincipal, gateOf, narrowFor, type Principal } from "./access.js"
import type { ToolGate } from "../domain/tool-filter.js"
import { errorBody, Forbidden, validationError } from "./contract-errors.js"
import { McpGateway } from "./gateway/endpoint.js"
import { ModernMcp } from "./gateway/modern.js"
import type { McpOperations } from "./gateway/face.js"
import { Calls, Catalog } from "../runtime/operations.js"
import { toolListingOf, type ToolListing } from "./gateway/search-mode.js"
import { fixedSealSource, sessionOwner, storeSealSource } from "./gateway/session-seal.js"
import { OAuthFlowError } from "../runtime/upstream-oauth.js"
import { ClusterUnavailable } from "../domain/errors.js"
import { log } from "../logging/log.js"
import { onDemand } from "../domain/on-demand.js"
import { METADATA_PATH, ProtectedResourceTag } from "./oauth-resource/protected-resource.js"
import { OAUTH_SERVER_ROUTES } from "./oauth-server/endpoints.js"

/** The extra routes, for the contract middleware's 405 answers. */
export const EXTRA_ROUTES: ReadonlyArray<RouteEntry> = [
  { method: "GET", path: "/openapi.json" },
  { method: "GET", path: "/docs" },
  { method: "GET", path: "/events" },
  { method: "GET", path: "/metrics" },
  { method: "GET", path: "/inspect/machines" },
  { method: "GET", path: "/inspect/actors" },
  { method: "GET", path: "/inspect/events" },
  { method: "GET", path: "/ui" },
  { method: "GET", path: "/oauth/callback" },
  { method: "POST", path: "/oauth/callback" },
  { method: "GET", path: METADATA_PATH },
  { method: "GET", path: `${METADATA_PATH}/mcp` },
  { method: "GET", path: `${METADATA_PATH}/for_agent/:agent_id/mcp` },
  ...["GET", "POST", "DELETE"].flatMap((method) => [
    { method, path: "/mcp" },
    { method, path: "/for_agent/:agent_id/mcp" }
  ]),
  { method: "GET", path: "/sse" },
  { method: "POST", path: "/messages" },
  { method: "GET", path: "/for_agent/:agent_id/sse" },
  { method: "POST", path: "/for_agent/:agent_id/messages" },
  // The built-in authorization server's (src/http/oauth-server/endpoints.ts), mounted by src/http/server.ts.
  ...OAUTH_SERVER_ROUTES
]

/** The OAuth callback's page: plain text in HTML, no script, nothing from the request, never in a frame (as the other pages). */
const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)

/** A page of the upstream OAuth callback: text (escaped), and HTML of the store's own after it (a form). */
const callbackPage = (status: number, text: string, form = "") =>
  HttpServerResponse.text(`<!doctype html><meta charset="utf-8"><title>mcp-store authorization</title><p>${escapeHtml(text)}</p>${form}\n`, {
    status,
    contentType: "text/html; charset=utf-8",
    headers: {
      // No script at all; the one form posts back here.
      "content-security-policy": "default-src 'none'; form-action 'self'; frame-ancestors 'none'",
      "x-frame-options": "DENY",
      "cache-control": "no-store",
      // Not "no-referrer": with it a browser sends the form's POST with `Origin: null`, which the
      // request guard refuses. The address (with its code) still goes to no other origin.
      "referrer-policy": "same-origin"
    }
  })

/**
 * The question an authorization asks before it is finished when it is a principal's own (per_user
 * oauth) or was started by a key not an admin's: whoever opens the URL authorizes the account they
 * sign in with, so the person in the browser is told who started it and connects it with a POST of
 * the same code and state, or cancels. (Someone sent another's URL would otherwise give their
 * account to whoever started it.)
 */
const confirmPage = (
  asked: { readonly name: string; readonly startedBy: string; readonly own: boolean },
  response: { readonly code: string; readonly state: string; readonly iss: string | undefined }
) =>
  callbackPage(
    200,
    `${asked.startedBy} asked to use your account of service '${asked.name}': once you connect it, calls of '${asked.name}' through this store${asked.own ? ` by ${asked.startedBy}` : ""} act as the account you just signed in with. Connect it only if you started this authorization yourself.`,
    `<form method="post" action="callback">${Object.entries(response)
      .filter((entry): entry is [string, string] => entry[1] !== undefined)
      .map(([name, value]) => `<input type="hidden" name="${name}" value="${escapeHtml(value)}">`)
      .join("")}<button type="submit" name="decision" value="connect">Connect my account</button> <button type="submit" name="decision" value="cancel">Cancel</button></form>`
  )

const HEARTBEAT_SECONDS = 15
/** Seconds a client refused at the event-stream cap is asked to wait (Retry-After). */
export const EVENT_STREAM_RETRY_AFTER_SECONDS = 5
const encoder = new TextEncoder()

/**
 * Takes one of the `maxEventStreams` slots (shared by `/events` and `/inspect/events`; the count is
 * the monitor's `eventStreams`) for the current request, or answers 429 TOO_MANY with Retry-After.
 * The slot is given back when the response closes, whichever way: the stream ended, the client
 * went away, shutdown cut the connection.
 */
const takeStreamSlot = (app: AppState) =>
  Effect.map(HttpServerRequest.HttpServerRequest, (request) => {
    const monitor = app.monitor
    const max = app.server.maxEventStreams
    if (monitor.eventStreams >= max) {
      const retry = EVENT_STREAM_RETRY_AFTER_SECONDS
      const body = errorBody("TOO_MANY", `Too many event streams: all ${max} are open; try again later`, {
        limit: "max_event_streams",
        max,
        retry_after_seconds: retry
      })
      return HttpServerResponse.unsafeJson(body, { status: 429, headers: { "retry-after": String(retry) } })
    }
    monitor.eventStreams += 1
    let held = true
    const release = () => {
      if (!held) return
      held = false
      monitor.eventStreams -= 1
    }
    const res = NodeHttpServerRequest.toServerResponse(request)
    // A response whose connection is already gone emits no more "close".
    if (res.destroyed) release()
    else res.once("close", release)
    return release
  })

/**
 * Every open stream waiting for shutdown, per server: the closing signal gets one listener for
 * them all (one per stream would trip Node's 10-listener leak warning with the 11th client).
 */
const shutdownWaiters = new WeakMap<AbortSignal, Set<() => void>>()

/** Runs `done` when shutdown begins (at once if it has); returns how to stop waiting. */
const onShutdown = (app: AppState, done: () => void): (() => void) => {
  const signal = app.closing.signal
  if (signal.aborted) {
    done()
    return () => undefined
  }
  let waiters = shutdownWaiters.get(signal)
  if (waiters === undefined) {
    const all = new Set<() => void>()
    waiters = all
    shutdownWaiters.set(signal, all)
    signal.addEventListener("abort", () => {
      for (const waiter of [...all]) waiter()
      all.clear()
    }, { once: true })
  }
  const set = waiters
  set.add(done)
  return () => void set.delete(done)
}

/**
 * A Server-Sent Events response fed by `subscribe`, in a slot of the stream cap: an id per event, a
 * heartbeat comment every 15 s, released at once when the client goes away, and ended when the
 * server shuts down.
 */
const sse = (app: AppState, subscribe: (send: (event: string, data: unknown) => void) => () => void) =>
  Effect.map(takeStreamSlot(app), (slot) => (typeof slot === "function" ? sseResponse(app, subscribe, slot) : slot))

const sseResponse = (app: AppState, subscribe: (send: (event: string, data: unknown) => void) => () => void, release: () => void) => {
  let id = 0
  const events = Stream.async<Uint8Array>(
    (emit) => {
      const off = subscribe((event, data) => {
        id += 1
        void emit.single(encoder.encode(`id: ${id}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`))
      })
      return Effect.sync(off)
    },
    // A client that does not keep up loses the oldest events rather than growing memory.
    { bufferSize: 1000, strategy: "sliding" }
  )
  const heartbeat = Stream.repeatValue(encoder.encode(": heartbeat\n\n")).pipe(
    Stream.schedule(Schedule.spaced(`${HEARTBEAT_SECONDS} seconds`))
  )
  const stopped = Effect.async<void>((resume) => {
    const off = onShutdown(app, () => resume(Effect.void))
    return Effect.sync(off)
  })
  const stream = Stream.concat(Stream.make(encoder.encode(": connected\n\n")), Stream.merge(events, heartbeat)).pipe(
    Stream.interruptWhen(stopped),
    Stream.ensuring(Effect.sync(release))
  )
  return HttpServerResponse.stream(stream, {
    contentType: "text/event-stream",
    headers: { "cache-control": "no-cache", "x-accel-buffering": "no" }
  })
}

/** The event-stream form of a monitor event, or undefined for events the stream does not carry. */
const streamEvent = (e: MonitorEvent): { event: string; scope: string; data: unknown } | undefined => {
  switch (e.type) {
    case "status":
      return {
        event: "status",
        scope: e.scope,
        data: { scope: e.scope, service_name: e.service_name, from: e.transition.from, to: e.transition.to, at: new Date(e.transition.at).toISOString(), reason: e.transition.reason }
      }
    case "tools_changed":
      return { event: "tools_changed", scope: e.scope, data: { scope: e.scope, service_name: e.service_name, tool_count: e.tool_count } }
    case "alert":
      return { event: "alert", scope: e.alert.scope, data: e.alert }
    case "auth":
      return { event: "auth", scope: e.scope, data: { scope: e.scope, service_name: e.service_name, ...e.auth } }
    case "tool_changed":
      return {
        event: "tool_changed",
        scope: e.scope,
        data: { scope: e.scope, service_name: e.service_name, tool_name: callableName(e.service_name, e.change.tool), original_name: e.change.tool, change: e.change.change, held: e.change.held, changed_fields: e.change.changed_fields }
      }
    case "check":
    case "removed":
    case "catalog_changed":
      return undefined
  }
}

/** The dashboard page's module (src/ui/page.ts), loaded by the first GET /ui: a bundle carries the page in it (80 KB). */
const dashboardPage = onDemand(() => import("../ui/page.js"))

/**
 * GET /openapi.json's bytes, made on the first request and kept for the process: the contract is
 * fixed, so every server of the process answers the same document (made at each server's start, as
 * HttpApiBuilder's middleware does, it cost about 10 ms of CPU a start).
 */
let openApiBytes: Uint8Array | undefined
const openApiDocument = (): Uint8Array => (openApiBytes ??= new TextEncoder().encode(JSON.stringify(OpenApi.fromApi(Api))))

export const ExtrasLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function* () {
    const app = yield* App
    const { store } = app
    const { metrics } = app
    // The parts these routes use, from the store's layer graph.
    const asyncCalls = yield* AsyncCallsService
    const approvals = yield* ApprovalsService
    const { oauth } = yield* ActorSystemService
    // The operations both MCP faces run (`/mcp`, `/sse` and their agent forms): taken once, here.
    const mcpOperations: McpOperations = { calls: yield* Calls, catalog: yield* Catalog }
    // Sealed session and task ids (src/http/gateway/session-seal.ts): the cluster's secret, else the store's own.
    const seal = app.sessionSecret !== undefined ? fixedSealSource(app.sessionSecret) : storeSealSource(app.storeOptions.mcpConfigFile)
    const gateway = yield* Effect.acquireRelease(
      Effect.sync(
        () =>
          new McpGateway(store, app.monitor, mcpOperations, {
            maxSessions: app.server.maxMcpSessions,
            idleSeconds: app.server.mcpSessionIdleSeconds,
            seal
          })
      ),
      (g) => Effect.promise(() => g.close())
    )
    // The 2026-07-28 face of the same endpoints (src/http/gateway/modern.ts): its listen streams
    // share the sessions' cap.
    const modern = yield* Effect.acquireRelease(
      Effect.sync(() => new ModernMcp(store, app.monitor, gateway, mcpOperations, { maxListenStreams: app.server.maxMcpSessions, seal })),
      (m) => Effect.promise(() => m.close())
    )
    onShutdown(app, () => {
      gateway.shutdown()
      modern.shutdown()
    })
    // The capped resources, beside the caps' own figures.
    new Gauge({
      name: "mcpstore_event_streams",
      help: `Open /events and /inspect/events streams (cap: ${app.server.maxEventStreams})`,
      registers: [metrics.registry],
      collect() {
        this.set(app.monitor.eventStreams)
      }
    })
    new Gauge({
      name: "mcpstore_mcp_listen_streams",
      help: `Open MCP 2026-07-28 subscriptions/listen streams on /mcp and /for_agent/{id}/mcp (cap: ${app.server.maxMcpSessions})`,
      registers: [metrics.registry],
      collect() {
        this.set(modern.bus.size)
      }
    })
    new Gauge({
      name: "mcpstore_mcp_sessions",
      help: `Open MCP sessions on /mcp, /sse and their /for_agent/{id}/ forms (cap: ${app.server.maxMcpSessions})`,
      registers: [metrics.registry],
      collect() {
        this.set(gateway.size)
      }
    })

    // The API's documentation page, made on its first request (src/http/docs-page.ts).
    const scope = yield* Effect.scope
    const docs = yield* Effect.cached(
      Effect.promise(() => import("./docs-page.js")).pipe(
        Effect.flatMap((m) => m.docsApp),
        EffectScope.extend(scope)
      )
    )
    yield* router.get("/docs", Effect.flatten(docs))
    yield* router.get("/openapi.json", Effect.sync(() => HttpServerResponse.uint8Array(openApiDocument(), { contentType: "application/json" })))

    yield* router.get(
      "/events",
      Effect.gen(function* () {
        const query = yield* HttpServerRequest.ParsedSearchParams
        const principal = yield* currentPrincipal
        const asked = typeof query["agent_id"] === "string" ? query["agent_id"] : undefined
        // An agent key sees its own agent's events only (src/http/access.ts).
        const narrowing = narrowFor(principal, { agent_id: asked })
        if ("forbidden" in narrowing) return yield* Effect.fail(new Forbidden(errorBody("FORBIDDEN", narrowing.forbidden, {})))
        const filter = narrowing.narrowing.agent_id
        if (filter !== undefined && filter !== "store" && agentIdProblem(filter)) {
          return yield* Effect.fail(validationError("Invalid request: agent_id", [{ field: "agent_id", problem: agentIdProblem(filter)! }]))
        }
        // An agent key's tools list (src/domain/tool-filter.ts): its stream tells only of the tools it
        // may see (calls and progress of others left out, tools_changed counting what it lists).
        const gate = gateOf(principal)
        const seen = (service: string, tool: string) => gate === undefined || gate.allows(callableName(service, tool))
        const gatedCount = (scope: string, service: string, count: number) => {
          if (gate === undefined) return count
          const actor = store.serviceActor(scope === "store" ? STORE_SCOPE : agentScope(scope), service)
          return actor === undefined ? 0 : toolViewsFor(actor.getSnapshot(), gate).length
        }
        return yield* sse(app, (send) => {
          const offMonitor = app.monitor.subscribe((e) => {
            const out = streamEvent(e)
            if (out === undefined || (filter !== undefined && out.scope !== filter)) return
            if (e.type === "tool_changed" && !seen(e.service_name, e.change.tool)) return
            if (e.type === "tools_changed" && gate !== undefined) send(out.event, { ...(out.data as object), tool_count: gatedCount(e.scope, e.service_name, e.tool_count) })
            else send(out.event, out.data)
          })
          const offRecords = store.records.onRecord((r) => {
            const scope = r.scope === "store" ? "store" : (r.agent_id ?? "")
            if (filter !== undefined && scope !== filter) return
            if (!seen(r.service_name, r.tool_name)) return
            send("tool_call", {
              scope,
              agent_id: r.agent_id,
              service_name: r.service_name,
              tool_name: r.tool_name,
              outcome: r.outcome,
              duration_ms: r.duration_ms,
              timestamp: r.timestamp,
              trace_id: r.trace_id,
              span_id: r.span_id ?? null
            })
          })
          // A call's progress, with its trace_id (throttled per call: src/runtime/progress.ts).
          const offProgress = store.progress.on((e) => {
            if ((filter === undefined || e.scope === filter) && seen(e.service_name, e.tool_name)) send("progress", e)
          })
          // Asynchronous calls' starts and ends (their progress is `progress`, with their call_id).
          const offAsync = asyncCalls.on((e) => {
            if (filter !== undefined && e.scope !== filter) return
            // A key's tools list: judged on the call's callable name once its target is known, on the name asked before.
            if (gate !== undefined && !(e.service_name === null || e.original_name === null ? gate.allows(e.tool_name) : seen(e.service_name, e.original_name))) return
            send("async_call", e)
          })
          // Calls waiting for an approval, and how each wait ended (src/runtime/approvals.ts).
          const offApprovals = approvals.on((e) => {
            if ((filter === undefined || e.scope === filter) && seen(e.service_name, e.original_name)) send("approval", e)
          })
          return () => {
            offMonitor()
            offRecords()
            offProgress()
            offAsync()
            offApprovals()
          }
        })
      })
    )

    yield* router.get(
      "/metrics",
      Effect.promise(() => metrics.registry.metrics()).pipe(
        Effect.map((text) => HttpServerResponse.text(text, { contentType: metrics.registry.contentType }))
      )
    )

    yield* router.get("/inspect/machines", Effect.sync(() => HttpServerResponse.unsafeJson({ success: true, machines: machineDefinitions() })))
    yield* router.get(
      "/inspect/actors",
      Effect.sync(() => {
        const actors = liveActors(store)
        return HttpServerResponse.unsafeJson({ success: true, total: actors.length, actors })
      })
    )
    yield* router.get(
      "/inspect/events",
      sse(app, (send) => store.onInspect((e) => send("inspect", inspectionSummary(e))))
    )

    yield* router.get(
      "/ui",
      Effect.promise(async () => (dashboardPage.loaded ?? (await dashboardPage.load())).dashboardHtml()).pipe(Effect.map((html) => HttpServerResponse.html(html)))
    )

    // The end of an upstream's OAuth authorization (src/runtime/upstream-oauth.ts): a plain page, nothing of
    // the request shown back, the state used once. A principal's own authorization (per_user oauth),
    // or one a key not an admin's started, asks first (`confirmPage`) and is finished by the POST of
    // its answer.
    const finishCallback = (code: string, state: string, iss: string | undefined) =>
      Effect.gen(function* () {
        const outcome = yield* Effect.promise(() =>
          oauth.finish({ code, state, iss }).then(
            (key) => ({ own: key.includes("\u0000") }),
            (e: unknown) => (e instanceof OAuthFlowError ? e.message : e instanceof ClusterUnavailable ? { unavailable: true as const } : "the authorization could not be finished")
          )
        )
        // Replica mode, Redis away: the state was not taken (or not known to be): the same URL may be tried again.
        if (typeof outcome !== "string" && "unavailable" in outcome) return unavailablePage()
        return typeof outcome !== "string"
          ? callbackPage(200, outcome.own ? "Authorized: your calls of the service now carry your own token. You can close this page." : "Authorized: the store now connects to the service. You can close this page.")
          : callbackPage(400, `The authorization did not finish: ${outcome}.`)
      })
    const unavailablePage = () => {
      log.warn("an OAuth callback could not be finished: the cluster's Redis does not answer", { event: "oauth_failed" })
      return callbackPage(503, "The authorization could not be finished now: the store's shared storage does not answer. Reload this page in a moment.")
    }
    /** What the callback asks before it finishes, when it asks: a principal's own authorization, or one a key not an admin's started. */
    const askedOf = (p: Awaited<ReturnType<typeof oauth.peekState>>) =>
      p === undefined || (p.principal === undefined && p.startedBy === undefined) ? undefined : { scope: p.scope, name: p.name, startedBy: p.startedBy ?? "a caller of this store", own: p.principal !== undefined }
    const one = (v: string | ReadonlyArray<string> | null | undefined) => (typeof v === "string" && v.length <= 4096 ? v : undefined)
    yield* router.get(
      "/oauth/callback",
      Effect.gen(function* () {
        const query = yield* HttpServerRequest.ParsedSearchParams
        const code = one(query["code"])
        const state = one(query["state"])
        // RFC 9207: the authorization server's issuer, checked against the one the flow started with (mix-up attacks).
        const iss = one(query["iss"])
        if (state === undefined || code === undefined) {
          if (state !== undefined) yield* Effect.promise(() => oauth.takeState(state).catch(() => undefined))
          return callbackPage(400, "The authorization did not finish: the authorization server sent no code (it may have been refused). Start it again.")
        }
        const pending = yield* Effect.promise(() => oauth.peekState(state).then((p) => ({ p }), (e: unknown) => (e instanceof ClusterUnavailable ? "unavailable" : { p: undefined })))
        if (pending === "unavailable") return unavailablePage()
        const asked = askedOf(pending.p)
        if (asked !== undefined) return confirmPage(asked, { code, state, iss })
        return yield* finishCallback(code, state, iss)
      })
    )
    // The answer of `confirmPage`: the same code and state, and the person's decision.
    yield* router.post(
      "/oauth/callback",
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const form = new URLSearchParams(yield* Effect.orElseSucceed(request.text, () => ""))
        const code = one(form.get("code"))
        const state = one(form.get("state"))
        const iss = one(form.get("iss"))
        if (state === undefined || code === undefined) return callbackPage(400, "The authorization did not finish: the answer carries no code and state. Start it again.")
        const pending = yield* Effect.promise(() => oauth.peekState(state).then((p) => ({ p }), (e: unknown) => (e instanceof ClusterUnavailable ? "unavailable" : { p: undefined })))
        if (pending === "unavailable") return unavailablePage()
        // Only an authorization that asks takes an answer (the others finish on the GET).
        const asked = askedOf(pending.p)
        if (asked === undefined) return callbackPage(400, "The authorization did not finish: unknown, expired or already used state. Start it again.")
        if (form.get("decision") !== "connect") {
          yield* Effect.promise(() => oauth.takeState(state).catch(() => undefined))
          log.info(`an OAuth authorization of service '${asked.name}' started by ${asked.startedBy} was cancelled in the browser`, { event: "oauth_cancelled", scope: scopeLabel(asked.scope), service: asked.name })
          return callbackPage(200, "Cancelled: your account was not connected, and this authorization cannot be used any more. You can close this page.")
        }
        return yield* finishCallback(code, state, iss)
      })
    )

    // The protected resource metadata (RFC 9728) of the store, of /mcp and of each agent's /mcp: where
    // MCP clients learn which authorization server to ask for a token. With a public URL that has a
    // path (a proxy's prefix), also under that path, as RFC 9728 builds the URL.
    const resource = yield* ProtectedResourceTag
    const metadataRoute = (resourcePath: (params: Readonly<Record<string, string | undefined>>) => string | { readonly problem: string }) =>
      Effect.gen(function* () {
        if (!resource.enabled) {
          return HttpServerResponse.unsafeJson(errorBody("NOT_FOUND", "This store trusts no OAuth authorization server (--auth-issuer): it takes API keys only", {}), { status: 404 })
        }
        const path = resourcePath(yield* HttpRouter.params)
        if (typeof path !== "string") return yield* Effect.fail(validationError(`Invalid request: agent_id ${path.problem}`, [{ field: "agent_id", problem: path.problem }]))
        return HttpServerResponse.unsafeJson(resource.metadata(path), { headers: { "cache-control": "no-cache" } })
      })
    const agentResource = (params: Readonly<Record<string, string | undefined>>) => {
      const id = params["agent_id"] ?? ""
      const problem = agentIdProblem(id)
      return problem === undefined ? `/for_agent/${encodeURIComponent(id)}/mcp` : { problem }
    }
    const prefixes = new Set(["", app.server.publicUrl === undefined ? "" : new URL(app.server.publicUrl).pathname.replace(/\/$/, "")])
    for (const prefix of prefixes) {
      yield* router.get(`${METADATA_PATH}${prefix}`, metadataRoute(() => ""))
      yield* router.get(`${METADATA_PATH}${prefix}/mcp`, metadataRoute(() => "/mcp"))
      yield* router.get(`${METADATA_PATH}${prefix}/for_agent/:agent_id/mcp`, metadataRoute(agentResource))
    }

    const searchSettings = { scopes: app.server.toolSearchScopes, alwaysVisible: app.server.alwaysVisibleTools }
    const mcp = (
      scopeOf: (params: Readonly<Record<string, string | undefined>>) => Scope | string,
      serve: (scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown, owner: string, gate: ToolGate | undefined, principal: Principal, listing: ToolListing | undefined) => Promise<void> = (
        scope,
        req,
        res,
        body,
        owner,
        gate,
        principal,
        listing
      ) =>
        // A 2025 request goes to its session; a 2026-07-28 one is answered without any (src/http/gateway/modern.ts).
        // Its answers are `private` when they depend on the key: an agent key's, or a key whose tool_mode chose the listing.
        modern.handle(
          { scope, gate, listing, cacheScope: principal.role === "agent" || ("toolMode" in principal && principal.toolMode !== undefined) ? "private" : "public", owner, keyed: req.headers.authorization !== undefined, who: callerWords(principal) },
          req,
          res,
          body,
          (rq, rs, b) => gateway.handle(scope, rq, rs, b, owner, gate, listing)
        )
    ) =>
      Effect.gen(function* () {
        const request = yield* HttpServerRequest.HttpServerRequest
        const params = yield* HttpRouter.params
        const scope = scopeOf(params)
        if (typeof scope === "string") {
          return yield* Effect.fail(validationError(`Invalid request: agent_id ${scope}`, [{ field: "agent_id", problem: scope }]))
        }
        // A session belongs to the key that opened it (src/http/gateway/session-seal.ts).
        const principal = yield* currentPrincipal
        const owner = sessionOwner(principal, request.headers["authorization"])
        const body = request.method === "POST" ? yield* Effect.orDie(request.json) : undefined
        const req = NodeHttpServerRequest.toIncomingMessage(request)
        const res = NodeHttpServerRequest.toServerResponse(request)
        // A session keeps the tool allow-list of the key that opened it (src/http/gateway/endpoint.ts).
        const gate = gateOf(principal)
        // Search mode (src/http/gateway/search-mode.ts): `?tools=search|full`, else the key's tool_mode, else --tool-search-scopes.
        const query = yield* HttpServerRequest.ParsedSearchParams
        const listing = toolListingOf(searchSettings, scope, principal, query["tools"])
        if (listing !== undefined && "problem" in listing) {
          return yield* Effect.fail(validationError(`Invalid request: tools ${listing.problem}`, [{ field: "tools", problem: listing.problem }]))
        }
        yield* Effect.promise(() => serve(scope, req, res, body, owner, gate, principal, listing))
        // The transport wrote the answer itself; the server sees the response ended and sends nothing more.
        return HttpServerResponse.empty()
      })
    const storeScope = () => STORE_SCOPE
    const agentFromPath = (params: Readonly<Record<string, string | undefined>>) => {
      const id = params["agent_id"] ?? ""
      return agentIdProblem(id) ?? agentScope(id)
    }
    for (const route of ["get", "post", "del"] as const) {
      yield* router[route]("/mcp", mcp(storeScope))
      yield* router[route]("/for_agent/:agent_id/mcp", mcp(agentFromPath))
    }
    // The legacy SSE transport (src/http/gateway/sse-endpoint.ts): the same sessions, in each scope.
    const sseStream = (scope: Scope, req: IncomingMessage, res: ServerResponse, _body: unknown, owner: string, gate: ToolGate | undefined, _principal: Principal, listing: ToolListing | undefined) =>
      gateway.openSse(scope, req, res, owner, gate, listing)
    const sseMessage = (scope: Scope, req: IncomingMessage, res: ServerResponse, body: unknown, owner: string) => gateway.postMessage(scope, req, res, body, owner)
    yield* router.get("/sse", mcp(storeScope, sseStream))
    yield* router.post("/messages", mcp(storeScope, sseMessage))
    yield* router.get("/for_agent/:agent_id/sse", mcp(agentFromPath, sseStream))
    yield* router.post("/for_agent/:agent_id/messages", mcp(agentFromPath, sseMessage))
  })
)
