/**
 * Builds and runs the HTTP server: the contract's handlers and middleware (API key, body checks,
 * errors in the contract's words), the OpenAPI document and docs page, on a Node http.Server that
 * this module owns, with the store as a scoped resource (started before the server listens,
 * stopped after it closes).
 *
 * Start-up: the port opens before the store is built and the handler attached (with 1,000
 * services that takes seconds); a request that arrives then is answered 503 with Retry-After.
 *
 * Shutdown: stop accepting, let requests in flight finish for a short grace period, then cut every
 * connection (open waits are interrupted), then stop the store (every child process ended).
 *
 * The faces built outside Effect (the direct call route, the cluster's internal route) are given
 * the call path (the `Calls` service) and the answers built on it, taken once by the `App` layer.
 */
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as HttpMiddleware from "@effect/platform/HttpMiddleware"
import * as HttpApp from "@effect/platform/HttpApp"
import { Cause, Context, Effect, Exit, Layer, Logger, LogLevel, ManagedRuntime, Option, Runtime } from "effect"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import { createHash } from "node:crypto"
import { defaultKeysFile, KeyRing, readApiKeyFile } from "../config/api-keys.js"
import { RedisKeyUses } from "../config/redis-key-uses.js"
import type { Cluster } from "../cluster/cluster.js"
import { clusterOf, storeLayerOn } from "../composition/layer-graph.js"
import type { ServerOptions, StoreOptions } from "../config/options.js"
import type { Monitor } from "../monitoring/monitor.js"
import { MetricsLive, MetricsService, MonitorLive, MonitorService } from "../monitoring/monitoring-layers.js"
import { log, logEnabled, StoreLoggerLive } from "../logging/log.js"
import { storeSettings } from "../runtime/store-layers.js"
import { StoreConfig } from "../runtime/services.js"
import { StoreService, type Store } from "../runtime/store.js"
import { Calls } from "../runtime/operations.js"
import { AgentHttpLive } from "./agent/Http.js"
import { ApprovalsHttpLive } from "./approvals/Http.js"
import { Api, routeTable } from "./Api.js"
import { ApplicationHttpLive, SystemHttpLive } from "./app/Http.js"
import { authorizationLayer } from "./authorization.js"
import { callRoute, retryAfterHeader, statusOfExit, type DirectCallParts, type DirectRoute } from "./call-route.js"
import { clusterRoute, type ReplicaParts } from "./cluster-route.js"
import { App, type AppState } from "./context.js"
import { contractErrors, pathOf, requestBodyLayer, ROUTER_CONFIG } from "./contract-middleware.js"
import { errorBody } from "./contract-errors.js"
import { guardRequests, isWildcard, requestPolicy } from "./request-guard.js"
import { EXTRA_ROUTES, ExtrasLive } from "./extras.js"
import { callAnswers } from "./scope-handlers.js"
import { MonitoringHttpLive } from "./monitoring/Http.js"
import * as NodeServer from "./node-server.js"
import { openRequestSpan, recordHttpSpan, requestSpan, routeTemplates } from "./request-span.js"
import { readTraceContext } from "../domain/trace-context.js"
import { StoreHttpLive } from "./store/Http.js"
import { UpstreamPolicy } from "../mcp/upstream-policy.js"
import { claimMapOf } from "../domain/claim-map.js"
import { externalIssuer, type ExternalIssuer } from "./oauth-resource/external-issuer.js"
import { ProtectedResource, ProtectedResourceTag } from "./oauth-resource/protected-resource.js"
import { TokenVerifier } from "./oauth-resource/token-verifier.js"
import { oauthServerRoutes } from "./oauth-server/endpoints.js"
import type { AuthorizationServer } from "./oauth-server/grants.js"

/** A running server. */
export interface RunningServer {
  /** Base URL, e.g. `http://127.0.0.1:18200`. */
  readonly url: string
  readonly port: number
  readonly store: Store
  /** Replica mode: the cluster this server's store is a replica of (undefined: one store on its file). */
  readonly cluster: Cluster | undefined
  /** Histories, alerts and request figures of the running server. */
  readonly monitor: Monitor
  /** The keys the server admits (the keys file, re-read on change). */
  readonly keys: KeyRing
  /**
   * With `--auth-server`: the built-in authorization server's issuer and the keys its access tokens
   * are verified with (for the resource side's verifier), and the server itself.
   */
  readonly authServer: AuthorizationServer | undefined
  /** Graceful shutdown; resolves when every connection and child process is gone. Idempotent. */
  close(): Promise<void>
}

export interface StartServerOptions {
  readonly server: ServerOptions
  readonly store: StoreOptions
  /** How long requests in flight may finish after shutdown begins (ms, default 2000). */
  readonly graceMs?: number
  /** false: call_tool and use_tool go through HttpApi like every other route (tests compare the two). */
  readonly directCalls?: boolean
  /**
   * The secret the MCP endpoint's session ids are sealed with (src/http/gateway/session-seal.ts): replicas
   * of one store pass the same one. Default: MCPSTORE_SECRET_KEY, else the key file beside the services file.
   */
  readonly sessionSecret?: string | Uint8Array
}

const effectLogLevel = (level: ServerOptions["logLevel"], debug: boolean) =>
  debug
    ? LogLevel.Debug
    : { debug: LogLevel.Debug, info: LogLevel.Info, warning: LogLevel.Warning, error: LogLevel.Error }[level]

/** Starts the store and the HTTP server; rejects (and releases everything) if either cannot start. */
export const startServer = async (options: StartServerOptions): Promise<RunningServer> => {
  // Replica mode: the other replicas reach this one at --advertise-url, which a wildcard address cannot give.
  if (options.store.cluster !== undefined && options.store.cluster.advertiseUrl === undefined && isWildcard(options.server.host)) {
    throw new Error(`--redis-url with --host ${options.server.host} needs --advertise-url (MCPSTORE_ADVERTISE_URL): the URL the other replicas reach this one at`)
  }
  // The built-in authorization server across replicas: each must present the same issuer, so the public URL is required.
  if (options.server.authServer === true && options.store.cluster !== undefined && options.server.publicUrl === undefined) {
    throw new Error("--auth-server in replica mode (--redis-url) needs --public-url (MCPSTORE_PUBLIC_URL): every replica must present the same issuer, the URL clients reach the cluster at")
  }
  // The keys: --api-key and MCPSTORE_API_KEY_FILE (admins) and the keys file, watched from now on.
  const adminKeys = [options.server.apiKey, options.server.apiKeyFile === undefined ? undefined : readApiKeyFile(options.server.apiKeyFile)]
  const keys = new KeyRing(
    options.store.keysFile ?? defaultKeysFile(options.store.mcpConfigFile),
    adminKeys.filter((k): k is string => k !== undefined),
    (message) => log.warn(message, { event: "keys_file" }),
    options.server.denyByDefault
  )
  keys.loadSync()
  keys.watch()
  const httpServer: Server = createServer()
  // The store's public base URL: --public-url, else the URL it listens at (known once it listens).
  const publicBase = () => {
    if (options.server.publicUrl !== undefined) return options.server.publicUrl
    const host = isWildcard(options.server.host) ? "127.0.0.1" : options.server.host
    return `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${currentPort()}`
  }
  // The built-in authorization server (--auth-server, docs/oauth-server.md), its issuer the public base
  // URL. Loaded on demand (jose with it): a store without --auth-server never loads them.
  const authServer = options.server.authServer === true
    ? new (await import("./oauth-server/grants.js")).AuthorizationServer({
        servicesFile: options.store.mcpConfigFile,
        issuer: publicBase,
        // Replica mode: the cluster's key, given with its state once the cluster is joined (below).
        key: options.store.cluster === undefined ? await (await import("../config/oauth-signing-key.js")).loadSigningKey(options.store.mcpConfigFile) : undefined,
        policy: new UpstreamPolicy({ allow: options.store.limits.upstreamAllow, allowMetadata: options.store.limits.upstreamAllowMetadata }),
        devLoopbackClients: options.server.authDevLoopbackClients === true,
        dynamicRegistration: options.server.authDynamicRegistration !== false
      })
    : undefined
  // The OAuth protected resource (src/http/oauth-resource/): the authorization servers whose tokens
  // are accepted, reached through the outbound policy (the built-in one is trusted once the server
  // listens: its issuer is the public URL).
  const issuers: Array<ExternalIssuer> =
    options.server.authIssuer === undefined
      ? []
      : [
          externalIssuer({
            issuer: options.server.authIssuer,
            claimMap: claimMapOf(options.server.authClaimMap),
            introspection: options.server.authIntrospection,
            policy: new UpstreamPolicy({ allow: options.store.limits.upstreamAllow, allowMetadata: options.store.limits.upstreamAllowMetadata })
          })
        ]
  const protectedResource = new ProtectedResource(publicBase, new TokenVerifier(issuers, options.server.denyByDefault))
  const ProtectedResourceLive = Layer.succeed(ProtectedResourceTag, protectedResource)
  for (const issuer of issuers) void issuer.warmUp()
  // The app's state once the store runs; and what the faces built outside Effect (the direct call
  // route, the cluster's internal route) serve with, taken from the layer graph at the same time.
  const state: { app?: AppState; direct?: DirectCallParts; replica?: ReplicaParts } = {}
  // Open client sockets, for monitoring (active_connections).
  const sockets = new Set<Socket>()
  const countSockets = () => {
    if (state.app) state.app.monitor.httpConnections = sockets.size
  }
  // A request Node's parser refuses is answered, then the connection ended gracefully (Node's own
  // handler destroys the socket, and a client still sending its body sees a reset, not the answer).
  httpServer.on("clientError", answerClientError)
  httpServer.on("connection", (socket: Socket) => {
    // Past the cap a connection is answered at once and closed: it never reaches a handler.
    if (sockets.size >= options.server.maxConnections) return refuseConnection(socket, options.server.maxConnections)
    sockets.add(socket)
    countSockets()
    socket.once("close", () => {
      sockets.delete(socket)
      countSockets()
    })
  })

  // The monitor watches the store from outside (src/monitoring/monitoring-layers.ts): every
  // actor's events through the store's inspection, so it is acquired before the store.
  const StoreSettingsLive = Layer.effect(
    StoreConfig,
    Effect.map(MonitorService, (monitor) =>
      storeSettings({
        mcpConfigFile: options.store.mcpConfigFile,
        monitoring: options.store.monitoring,
        toolRecordMaxFileSize: options.store.toolRecordMaxFileSize,
        toolRecordRetentionDays: options.store.toolRecordRetentionDays,
        limits: options.store.limits,
        inspect: monitor.inspect,
        cluster: options.store.cluster,
        tracing: options.store.tracing,
        pinTools: options.store.pinTools
      })
    )
  )
  const StoreGraphLive = storeLayerOn(StoreSettingsLive, options.store.cluster !== undefined).pipe(Layer.provideMerge(MonitorLive))
  // Replica mode: the cluster this replica is part of (the internal route and the banner need it).
  let cluster: Cluster | undefined
  const AppLive = Layer.scoped(
    App,
    Effect.gen(function* () {
      const store = yield* StoreService
      const monitor = yield* MonitorService
      const metrics = yield* MetricsService
      cluster = Option.getOrUndefined(yield* clusterOf)
      // The call path, taken once for the faces built outside Effect, with the REST call answers on it.
      const calls = yield* Calls
      const answers = callAnswers(calls)
      // Replica mode: the keys' last uses go to the cluster's Redis, so replicas never rewrite one keys file.
      if (cluster !== undefined) keys.writeUsesTo(new RedisKeyUses({ client: cluster.connection.client, cluster: cluster.options.name }).write)
      // Replica mode: the built-in authorization server's state and signing key are the cluster's; let go on release.
      if (cluster !== undefined && authServer !== undefined) {
        const data = { client: cluster.connection.client, cluster: cluster.options.name }
        yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const [{ RedisGrantState }, { loadClusterSigningKey }] = await Promise.all([import("./oauth-server/redis-grant-state.js"), import("../config/oauth-signing-key.js")])
            const key = await loadClusterSigningKey(data)
            await authServer.attach(await RedisGrantState.open(data), key)
          }),
          () => Effect.promise(() => authServer.close())
        )
      }
      state.app = {
        store,
        monitor,
        server: options.server,
        storeOptions: options.store,
        closing: new AbortController(),
        port: () => {
          const address = httpServer.address()
          return typeof address === "object" && address !== null ? address.port : options.server.port
        },
        metrics,
        sessionSecret: options.sessionSecret
      }
      // The asynchronous calls a previous run left following an upstream task: followed again,
      // now that their answers can be rendered as this API answers them.
      state.direct = { store, calls, answers }
      if (cluster !== undefined) state.replica = { store, cluster, asyncAnswer: answers.asyncAnswer }
      store.asyncCalls.resume(answers.asyncAnswer, (label) => (label === "store" ? store.forStore().effects : Option.getOrUndefined(Effect.runSync(Effect.option(store.agentContext(label))))))
      return state.app
    })
  ).pipe(
    // The store's graph stays visible to the handlers' layers: they take the operations and parts from it.
    Layer.provideMerge(MetricsLive.pipe(Layer.provideMerge(StoreGraphLive)))
  )

  const errors = contractErrors([...routeTable(), ...EXTRA_ROUTES])
  const ApiLive = HttpApiBuilder.api(Api).pipe(
    Layer.provide([StoreHttpLive, AgentHttpLive, MonitoringHttpLive, ApplicationHttpLive, SystemHttpLive, ApprovalsHttpLive]),
    Layer.provide([authorizationLayer(keys).pipe(Layer.provide(ProtectedResourceLive)), requestBodyLayer(options.server.maxBodyBytes)]),
    Layer.provide(HttpApiBuilder.middleware(Api, errors))
  )

  // Every API request's latency feeds the monitor (system_performance) and the metrics.
  const observe = (method: string, status: number, ms: number) => {
    const app = state.app
    if (app === undefined) return
    app.monitor.recordRequest(ms)
    app.metrics.observeRequest(method, status, ms / 1000)
  }
  // Access lines, at debug level only (--log-level debug routes every request through HttpApi).
  const access = options.server.logLevel === "debug" || options.store.debug
  const accessLine = (request: HttpServerRequest.HttpServerRequest, status: number, ms: number, spanTrace: string | undefined) => {
    if (!logEnabled("debug")) return
    const path = request.url.split("?", 1)[0] as string
    // The trace id: the request's span's (tracing on), else the caller's traceparent's.
    const traceId = spanTrace ?? readTraceContext(request.headers)?.traceId
    const trace = traceId === undefined ? "" : ` trace ${traceId}`
    log.debug(`${request.method} ${path} ${status} ${ms.toFixed(1)} ms${trace}`, { event: "access", method: request.method, path, status, duration_ms: Math.round(ms * 10) / 10, trace_id: traceId })
  }
  // Tracing on: every request's span, by its route template (src/http/request-span.ts).
  const routeOf = routeTemplates([...routeTable(), ...EXTRA_ROUTES])
  const measured = (app: HttpApp.Default): HttpApp.Default<never, HttpServerRequest.HttpServerRequest> =>
    Effect.withFiberRuntime((fiber) => {
      const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
      const started = performance.now()
      const tracer = state.app?.store.tracer
      const span = tracer?.enabled === true ? openRequestSpan(readTraceContext(request.headers)) : undefined
      return Effect.onExit(span === undefined ? app : Effect.locally(app, requestSpan, span), (exit) =>
        Effect.sync(() => {
          const status = statusOfExit(exit)
          const ms = performance.now() - started
          observe(request.method, status, ms)
          if (access) accessLine(request, status, ms, span?.traceId)
          if (span !== undefined && tracer !== undefined) {
            const path = request.url.split("?", 1)[0] as string
            recordHttpSpan(tracer, span, { method: request.method, route: routeOf(request.method, path), path, status, startMs: started })
          }
        })
      )
    }) as never

  // The port is read once the server listens (it never changes after), not per request.
  let listeningPort: number | undefined
  const currentPort = () => (listeningPort ??= httpServer.listening ? state.app?.port() : undefined) ?? options.server.port
  const policy = requestPolicy(options.server, currentPort)
  const guarded = guardRequests(policy)
  // Replica mode: the replicas' internal route (src/http/cluster-route.ts), before anything else.
  const internal = clusterRoute(() => state.replica, options.server.maxBodyBytes)
  // call_tool and use_tool go straight to their handler (src/http/call-route.ts); the rest to HttpApi.
  const calls = (runtime: Runtime.Runtime<never>) =>
    options.directCalls === false
      ? () => false
      : callRoute(
          {
            policy,
            keys,
            resource: protectedResource,
            maxBodyBytes: options.server.maxBodyBytes,
            debug: access,
            contractErrors: errors,
            observe
          },
          runtime,
          () => state.direct
        )
  const direct = (runtime: Runtime.Runtime<never>): DirectRoute => {
    const call = calls(runtime)
    return (request, response) => internal(request, response) || call(request, response)
  }
  // Headers every answer carries, and those of the two HTML pages and of 429 answers.
  const hardened = (app: HttpApp.Default): HttpApp.Default =>
    Effect.zipRight(
      HttpApp.appendPreResponseHandler((request, response) => Effect.succeed(responseHeaders(request, response))),
      app
    )

  const ServerLive = HttpApiBuilder.serve((app) => measured(guarded(hardened(app)))).pipe(
    // Effect's server opens a tracing span per request (URL parsed, every header copied as an
    // attribute) even with no tracer installed: nothing here reads spans, so it is switched off.
    HttpMiddleware.withTracerDisabledWhen(() => true),
    Layer.provide(ExtrasLive),
    Layer.provide(ProtectedResourceLive),
    Layer.provide(oauthServerRoutes(authServer)),
    Layer.provide(ApiLive),
    Layer.provide(AppLive),
    // No "Listening on" line of Effect's: the program's banner says it (src/main.ts).
    Layer.provide(NodeServer.layer(() => httpServer, { port: options.server.port, host: options.server.host }, direct)),
    Layer.provide(Logger.minimumLogLevel(effectLogLevel(options.server.logLevel, options.store.debug))),
    Layer.provide(StoreLoggerLive),
    Layer.provide(HttpRouter.setRouterConfig(ROUTER_CONFIG))
  )

  const runtime = ManagedRuntime.make(ServerLive)
  const started = answerWhileStarting(httpServer)
  try {
    await runtime.runPromise(Effect.void)
  } catch (e) {
    await runtime.dispose().catch(() => undefined)
    await keys.close()
    for (const issuer of issuers) issuer.close()
    throw unwrapStartError(e)
  } finally {
    started()
  }
  const app = state.app as AppState
  const port = app.port()
  const host = isWildcard(options.server.host) ? "127.0.0.1" : options.server.host

  let closing: Promise<void> | undefined
  const close = () => {
    closing ??= (async () => {
      app.closing.abort()
      // Replica mode: no lease is taken from now on. A replica whose address refuses connections
      // counts as running nothing for the others' outage questions, and the listener closes next.
      cluster?.leaving()
      const drained = new Promise<void>((resolve) => httpServer.close(() => resolve()))
      httpServer.closeIdleConnections()
      // A response that ends during the grace period (an event stream ended by the abort above, a
      // request that finished) leaves its keep-alive socket idle: close it then, not at the end.
      const idle = setInterval(() => httpServer.closeIdleConnections(), 20)
      let timer: NodeJS.Timeout | undefined
      await Promise.race([drained, new Promise<void>((r) => (timer = setTimeout(r, options.graceMs ?? 2000)))])
      clearTimeout(timer)
      clearInterval(idle)
      httpServer.closeAllConnections()
      await runtime.dispose()
      await authServer?.flush()
      await keys.close()
      for (const issuer of issuers) issuer.close()
    })()
    return closing
  }

  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}`
  // The built-in authorization server's tokens are checked as any trusted issuer's (revocation included).
  if (authServer !== undefined) protectedResource.verifier.trust(authServer.trustedIssuer())
  // The redirect URI of upstream OAuth authorizations: under the public URL when one is given (behind
  // a proxy, or replicas: any of them finishes an authorization), else the listen URL (a wildcard address is reached as localhost).
  app.store.oauthCallbackUrl = `${options.server.publicUrl ?? (host === "0.0.0.0" || host === "::" ? `http://localhost:${port}` : url)}/oauth/callback`
  // The approval page a call's URL elicitation and progress point to (the dashboard's approvals panel).
  app.store.approvals.pageUrl = `${options.server.publicUrl ?? (host === "0.0.0.0" || host === "::" ? `http://localhost:${port}` : url)}/ui`
  cluster?.advertise(url)
  return { url, port, store: app.store, cluster, monitor: app.monitor, keys, authServer, close }
}

/** Seconds a client is asked to wait (Retry-After) when the connection cap is reached. */
const CONNECTIONS_RETRY_AFTER_SECONDS = 1

/** Answers a connection past `--max-connections` with 503 and closes it. */
/** How long a connection whose request the parser refused may stay half-closed before it is destroyed. */
const CLIENT_ERROR_LINGER_MS = 2_000

/**
 * A request the HTTP parser refused (an unknown method, a malformed request line or header, headers
 * over the limit, a request that took too long): 431 or 408 without a body, as Node answers them,
 * else 400 with the contract's error body; written, then the connection half-closed so that the client reads it, and
 * destroyed after `CLIENT_ERROR_LINGER_MS` whatever the client does.
 */
const answerClientError = (error: NodeJS.ErrnoException, socket: Socket): void => {
  socket.on("error", () => undefined)
  if (error.code === "ECONNRESET" || !socket.writable) return void socket.destroy()
  const [status, reason] =
    error.code === "HPE_HEADER_OVERFLOW" ? [431, "Request Header Fields Too Large"] : error.code === "ERR_HTTP_REQUEST_TIMEOUT" ? [408, "Request Timeout"] : [400, "Bad Request"]
  const body = status === 400 ? JSON.stringify(errorBody("VALIDATION_ERROR", `Malformed HTTP request: ${error.code ?? "refused by the HTTP parser"}`, {})) : ""
  const type = body === "" ? "" : "content-type: application/json\r\n"
  socket.end(`HTTP/1.1 ${status} ${reason}\r\n${type}connection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
  setTimeout(() => socket.destroy(), CLIENT_ERROR_LINGER_MS).unref()
}

const refuseConnection = (socket: Socket, max: number): void => {
  const message = `Too many connections (the cap is ${max}); try again shortly`
  const body = JSON.stringify(errorBody("SERVICE_UNAVAILABLE", message, { limit: "max_connections", max, retry_after_seconds: CONNECTIONS_RETRY_AFTER_SECONDS }))
  socket.on("error", () => undefined)
  socket.end(
    "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n" +
      `retry-after: ${CONNECTIONS_RETRY_AFTER_SECONDS}\r\nconnection: close\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  )
}

/**
 * The Content-Security-Policy of the dashboard and the docs page: scripts only their own inline
 * ones (by hash) and none from elsewhere, requests only to the store, no framing.
 */
const pagePolicy = (html: string): string => {
  const hashes = [...html.matchAll(/<script(?![^>]*type="application\/json")[^>]*>([\s\S]*?)<\/script>/g)].map(
    (m) => `'sha256-${createHash("sha256").update(m[1] as string).digest("base64")}'`
  )
  return [
    "default-src 'none'",
    `script-src ${hashes.length > 0 ? hashes.join(" ") : "'none'"}`,
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'none'"
  ].join("; ")
}
const pagePolicies = new Map<string, string>()

/** Adds the headers every answer carries, those of the HTML pages, and Retry-After on 429 and 503 answers (`retryAfterHeader`). */
const responseHeaders = (request: HttpServerRequest.HttpServerRequest, response: HttpServerResponse.HttpServerResponse): HttpServerResponse.HttpServerResponse => {
  let out = HttpServerResponse.setHeader(response, "x-content-type-options", "nosniff")
  const body = response.body
  if ((response.status === 429 || response.status === 503) && body._tag === "Uint8Array") {
    const retry = retryAfterOfBytes(response.status, body.body)
    if (retry !== undefined) out = HttpServerResponse.setHeader(out, "retry-after", retry)
  }
  // The route's path however it was spelled (`/ui;x`, `/%75i` are the page too): the page's headers go with it.
  const path = pathOf(request.url)
  if ((path === "/ui" || path === "/docs") && body._tag === "Uint8Array" && body.contentType.startsWith("text/html")) {
    let policy = pagePolicies.get(path)
    if (policy === undefined) {
      policy = pagePolicy(new TextDecoder().decode(body.body))
      pagePolicies.set(path, policy)
    }
    out = HttpServerResponse.setHeaders(out, { "content-security-policy": policy, "x-frame-options": "DENY", "referrer-policy": "no-referrer" })
  }
  return out
}

/** The Retry-After of a 429 or 503 answer's bytes (the contract's error body), as the direct route reads it. */
const retryAfterOfBytes = (status: number, bytes: Uint8Array): string | undefined => {
  try {
    return retryAfterHeader(status, JSON.parse(new TextDecoder().decode(bytes)))
  } catch {
    return status === 429 ? "1" : undefined
  }
}

/** Seconds a client is asked to wait (Retry-After) while the server is starting. */
const STARTING_RETRY_AFTER_SECONDS = 1

/**
 * Answers the requests that arrive while the server starts: Effect's Node server listens as soon as
 * its layer is built, before the store is loaded and the handler attached, and Node leaves a request
 * that no listener answers open for ever. Until then each one gets 503 SERVICE_UNAVAILABLE (the
 * contract's error body) with Retry-After. It steps aside for any request once another request
 * listener (the real handler) is attached. Returns the function that removes it.
 */
export const answerWhileStarting = (server: Server): (() => void) => {
  const listener = (request: IncomingMessage, response: ServerResponse) => {
    if (server.listenerCount("request") > 1) return
    request.resume() // read and drop the body, so the connection can be used again
    const message = "The server is starting; try again shortly"
    const nextRetryAt = new Date(Date.now() + STARTING_RETRY_AFTER_SECONDS * 1000).toISOString()
    const body = JSON.stringify(errorBody("SERVICE_UNAVAILABLE", message, { status: "starting", next_retry_at: nextRetryAt }))
    response.writeHead(503, {
      "content-type": "application/json",
      "content-length": Buffer.byteLength(body),
      "retry-after": String(STARTING_RETRY_AFTER_SECONDS)
    })
    response.end(body)
  }
  server.on("request", listener)
  return () => void server.off("request", listener)
}

/** Effect wraps start failures (a port in use, a broken services file): give back the cause. */
const unwrapStartError = (e: unknown): unknown => {
  const squashed: unknown = Runtime.isFiberFailure(e) ? Cause.squash(e[Runtime.FiberFailureCauseId]) : e
  // A ServeError (listen failed) carries the Node error, e.g. EADDRINUSE, as its cause.
  const serve = squashed as { _tag?: string; cause?: unknown }
  return serve._tag === "ServeError" && serve.cause !== undefined ? serve.cause : squashed
}
