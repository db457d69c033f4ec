/**
 * Resources, resource templates and prompts of a scope, aggregated from its connected services
 * (docs/resources-and-prompts.md), and the operations that reach them: resources/read,
 * prompts/get, completion/complete, routed to the owning service, and a `per_user` service's
 * resources/subscribe on the caller's own connection. One room beside calls, commands
 * and queries, used by the HTTP handlers, the MCP endpoint (src/http/gateway/endpoint.ts) and ScopeApi.
 * A read or a prompt may need its caller's input, as a tool call may: the face that can answer gives
 * its relay (`CatalogInput`), or runs it as a held call (`heldCatalogRun`).
 *
 * Naming: prompts are `<service>__<prompt>`, as tools are. Resources and templates keep their
 * URI; when two services of the scope expose the same one, each copy is offered as
 * `mcp-store://<service>/<original URI>` (reversible: the service is what lies between `//` and
 * the next `/`, the original is the rest, verbatim). The prefixed form is accepted for any
 * resource, colliding or not.
 */
import { Cause, Effect, Exit, FiberRef, Option } from "effect"
import type { CompleteResult, GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplateType as ResourceTemplate } from "@modelcontextprotocol/client"
import { UriTemplate } from "@modelcontextprotocol/server"
import { mcpError, ProtocolErrorCode } from "../mcp/protocol-error.js"
import { statusOf, type ServiceActorRef, type ServiceSnapshot } from "../machines/service.js"
import { McpRequestError, type Catalog, type CompleteParams, type McpConnection, type UpstreamRequestRelay } from "../mcp/types.js"
import { suggestions } from "../domain/suggest.js"
import { PromptNotFound, ValidationError, type ClusterUnavailable, type CredentialsRequired, type ServiceUnavailable, type ResourceNotFound, type ToolTimeout, type TooMany, type UpstreamError } from "../domain/errors.js"
import { requestFailure, resourceNotFound, serviceUnavailable } from "./failures.js"
import type { ScopeContext } from "./host.js"
import type { HeldRun } from "./input-required.js"
import { runToExit } from "./run.js"
import { callableName, isConnected } from "./service-views.js"
import { requestSpan, type SpanAttributes } from "../logging/tracing.js"
import { openUpstreamSpan } from "./upstream-span.js"
import { requestAsPrincipal, type CredentialChecks } from "./per-user-request.js"
import { NotConnected } from "./service-request.js"
import { perUserOf, type ConnectionHold } from "./user-credentials.js"
import { CATALOG_REQUEST_TIMEOUT_MS, MAX_URI_LENGTH } from "./catalog-limits.js"

/** The scheme of a prefixed URI: `mcp-store://<service>/<original URI>`. */
export const PREFIX_SCHEME = "mcp-store://"

/** The bounds of the catalog's requests, kept apart (src/runtime/catalog-limits.ts) for the faces. */
export { CATALOG_REQUEST_TIMEOUT_MS, MAX_URI_LENGTH }

/** A resource as a scope offers it: the upstream's fields, its exposed `uri`, its service and original URI. */
export type ResourceView = Resource & { readonly service_name: string; readonly original_uri: string }
export type ResourceTemplateView = ResourceTemplate & { readonly service_name: string; readonly original_uri_template: string }
export type PromptView = Prompt & { readonly service_name: string; readonly original_name: string }

/** `mcp-store://<service>/<uri>`. */
export const prefixedUri = (service: string, uri: string): string => `${PREFIX_SCHEME}${service}/${uri}`

/**
 * The URI a scope shows for a service's URI (or template): prefixed when another service lists the
 * same one, or when it is in the store's own scheme already (shown as is, it would name another
 * service, or none).
 */
const exposedUri = (service: string, uri: string, owners: number): string => (owners > 1 || uri.startsWith(PREFIX_SCHEME) ? prefixedUri(service, uri) : uri)

/** The service and original URI of a prefixed URI, or undefined for any other URI. */
export const unprefixUri = (uri: string): { readonly service: string; readonly uri: string } | undefined => {
  if (!uri.startsWith(PREFIX_SCHEME)) return undefined
  const rest = uri.slice(PREFIX_SCHEME.length)
  const slash = rest.indexOf("/")
  if (slash <= 0) return undefined
  return { service: rest.slice(0, slash), uri: rest.slice(slash + 1) }
}

/** The connected services of the scope, in name order (a stable list order). */
const connected = (ctx: ScopeContext): Array<ServiceSnapshot> =>
  Object.values(ctx.actors())
    .map((a) => a.getSnapshot())
    .filter((s) => isConnected(statusOf(s)))
    .sort((a, b) => (a.context.name < b.context.name ? -1 : a.context.name > b.context.name ? 1 : 0))

/** The name of the service a list is filtered on (by name or client_id; ServiceNotFound thrown when unknown). */
const only = (ctx: ScopeContext, serviceName: string | undefined): string | undefined =>
  serviceName === undefined ? undefined : ctx.requireService(serviceName).getSnapshot().context.name

/** Each item's key -> how many services expose it. */
const owners = <T>(snapshots: ReadonlyArray<ServiceSnapshot>, items: (s: ServiceSnapshot) => ReadonlyArray<T>, key: (t: T) => string) => {
  const count = new Map<string, Set<string>>()
  for (const s of snapshots) {
    for (const item of items(s)) {
      const k = key(item)
      let set = count.get(k)
      if (set === undefined) count.set(k, (set = new Set()))
      set.add(s.context.name)
    }
  }
  return (k: string) => count.get(k)?.size ?? 0
}

/** Every resource of the scope (or of one service), URIs prefixed where two services collide. */
export const resourceViews = (ctx: ScopeContext, serviceName?: string): Array<ResourceView> => {
  const name = only(ctx, serviceName)
  const all = connected(ctx)
  const shared = owners(all, (s) => s.context.catalog.resources, (r) => r.uri)
  return all
    .filter((s) => name === undefined || s.context.name === name)
    .flatMap((s) =>
      s.context.catalog.resources.map((r) => ({
        ...r,
        uri: exposedUri(s.context.name, r.uri, shared(r.uri)),
        service_name: s.context.name,
        original_uri: r.uri
      }))
    )
}

/** Every resource template of the scope (or of one service), prefixed as resources are. */
export const resourceTemplateViews = (ctx: ScopeContext, serviceName?: string): Array<ResourceTemplateView> => {
  const name = only(ctx, serviceName)
  const all = connected(ctx)
  const shared = owners(all, (s) => s.context.catalog.resourceTemplates, (t) => t.uriTemplate)
  return all
    .filter((s) => name === undefined || s.context.name === name)
    .flatMap((s) =>
      s.context.catalog.resourceTemplates.map((t) => ({
        ...t,
        uriTemplate: exposedUri(s.context.name, t.uriTemplate, shared(t.uriTemplate)),
        service_name: s.context.name,
        original_uri_template: t.uriTemplate
      }))
    )
}

/** Every prompt of the scope (or of one service), named `<service>__<prompt>`. */
export const promptViews = (ctx: ScopeContext, serviceName?: string): Array<PromptView> => {
  const name = only(ctx, serviceName)
  return connected(ctx)
    .filter((s) => name === undefined || s.context.name === name)
    .flatMap((s) =>
      s.context.catalog.prompts.map((p) => ({ ...p, name: callableName(s.context.name, p.name), service_name: s.context.name, original_name: p.name }))
    )
}

/** What the scope's services declared beside tools (any service that connected since the store started). */
export const scopeCapabilities = (ctx: ScopeContext) => {
  const declared = Object.values(ctx.actors()).map((a) => a.getSnapshot().context.capabilities)
  return {
    resources: declared.some((c) => c?.resources === true),
    subscribe: declared.some((c) => c?.subscribe === true),
    prompts: declared.some((c) => c?.prompts === true),
    completions: declared.some((c) => c?.completions === true)
  }
}

/** A fingerprint of the scope's resource (and template) list and of its prompt list, to tell a change. */
export const catalogFingerprint = (ctx: ScopeContext): { readonly resources: string; readonly prompts: string } => ({
  resources: [...resourceViews(ctx).map((r) => r.uri), "\n", ...resourceTemplateViews(ctx).map((t) => t.uriTemplate)].join("\n"),
  prompts: promptViews(ctx)
    .map((p) => p.name)
    .join("\n")
})

/** The service a resource URI belongs to, and the URI to send it. */
export interface ResourceTarget {
  readonly actor: ServiceActorRef
  readonly uri: string
}

const notFound = (ctx: ScopeContext, uri: string, why = ""): ResourceNotFound => resourceNotFound(ctx.label, uri, why)

/**
 * A scope's resource URIs, for reads: each listed URI (as exposed) -> its service and original URI,
 * and the compiled templates of each connected service that offers resources. Built from the
 * snapshots of the scope's services and kept while each of them still has the catalog, the
 * connected state and the capabilities it was built from: a read checks that (one snapshot look
 * per service, nothing allocated) instead of rebuilding the scope's lists and parsing its templates.
 */
interface ResourceIndex {
  /** Per service, in the scope record's order: what the index was built from. */
  readonly basis: ReadonlyArray<{ readonly actor: ServiceActorRef; readonly catalog: Catalog; readonly connected: boolean; readonly capabilities: unknown }>
  /** Exposed URI -> its service and original URI; null when two services expose it alike (no owner). */
  readonly listed: ReadonlyMap<string, { readonly service: string; readonly uri: string } | null>
  /** Connected services that offer resources, in name order, with their templates (null: one the parser refused). */
  readonly offering: ReadonlyArray<{ readonly service: string; readonly templates: ReadonlyArray<UriTemplate | null> }>
}

/**
 * One index per services record: a scope's record is replaced whenever a service is added or
 * removed, so an index never outlives its scope's set of services (a WeakMap: bounded by the live
 * records, each index by the catalogs its services already hold).
 */
const resourceIndexes = new WeakMap<Readonly<Record<string, ServiceActorRef>>, ResourceIndex>()

const indexStillHolds = (index: ResourceIndex, actors: ReadonlyArray<ServiceActorRef>): boolean => {
  if (index.basis.length !== actors.length) return false
  for (let i = 0; i < actors.length; i++) {
    const basis = index.basis[i]!
    const snapshot = actors[i]!.getSnapshot()
    if (basis.actor !== actors[i] || basis.catalog !== snapshot.context.catalog || basis.capabilities !== snapshot.context.capabilities) return false
    if (basis.connected !== isConnected(statusOf(snapshot))) return false
  }
  return true
}

const compileTemplate = (template: string): UriTemplate | null => {
  try {
    return new UriTemplate(template)
  } catch {
    return null // a template the parser refuses (too long, malformed) matches nothing
  }
}

/** The scope's resource index, rebuilt only when one of its services' catalog or state changed. */
const resourceIndex = (ctx: ScopeContext): ResourceIndex => {
  const record = ctx.actors()
  const actors = Object.values(record)
  const cached = resourceIndexes.get(record)
  if (cached !== undefined && indexStillHolds(cached, actors)) return cached
  const basis = actors.map((actor) => {
    const snapshot = actor.getSnapshot()
    return { actor, catalog: snapshot.context.catalog, connected: isConnected(statusOf(snapshot)), capabilities: snapshot.context.capabilities as unknown }
  })
  const listed = new Map<string, { readonly service: string; readonly uri: string } | null>()
  for (const r of resourceViews(ctx)) listed.set(r.uri, listed.has(r.uri) ? null : { service: r.service_name, uri: r.original_uri })
  const offering = connected(ctx)
    .filter((s) => s.context.capabilities?.resources === true)
    .map((s) => ({ service: s.context.name, templates: s.context.catalog.resourceTemplates.map((t) => compileTemplate(t.uriTemplate)) }))
  const index: ResourceIndex = { basis, listed, offering }
  resourceIndexes.set(record, index)
  return index
}

const templateMatches = (template: UriTemplate | null, uri: string): boolean => {
  if (template === null) return false
  try {
    return template.match(uri) !== null
  } catch {
    return false // a URI the matcher refuses (too long) matches nothing
  }
}

/**
 * The service of a resource URI: the prefixed form names it; a listed URI is its service's; a URI
 * that matches exactly one service's template (a `resource_link` of a tool, a dynamic resource) is
 * that service's; otherwise the only connected service that offers resources, if there is one.
 */
export const resolveResource = (ctx: ScopeContext, uri: string): ResourceTarget => {
  const actors = ctx.actors()
  const prefixed = unprefixUri(uri)
  if (prefixed !== undefined) {
    const actor = Object.hasOwn(actors, prefixed.service) ? actors[prefixed.service] : undefined
    if (actor === undefined) throw notFound(ctx, uri, `: no service '${prefixed.service}' in this scope`)
    return { actor, uri: prefixed.uri }
  }
  const index = resourceIndex(ctx)
  const listed = index.listed.get(uri)
  if (listed != null) return { actor: actors[listed.service]!, uri: listed.uri }
  const matching = index.offering.filter((o) => o.templates.some((t) => templateMatches(t, uri)))
  if (matching.length === 1) return { actor: actors[matching[0]!.service]!, uri }
  if (matching.length === 0 && index.offering.length === 1) return { actor: actors[index.offering[0]!.service]!, uri }
  throw notFound(
    ctx,
    uri,
    matching.length > 1 || index.offering.length > 1 ? `; several services may serve it: name one with ${PREFIX_SCHEME}<service>/<uri>` : ""
  )
}

/** The service of a prompt name `<service>__<prompt>`, and the prompt's own name. */
export const resolvePrompt = (ctx: ScopeContext, name: string): { readonly actor: ServiceActorRef; readonly name: string } => {
  const views = promptViews(ctx)
  const view = views.find((p) => p.name === name)
  if (view === undefined) {
    const close = suggestions(name, views.map((p) => p.name))
    throw new PromptNotFound({
      message: `Prompt '${name.slice(0, 200)}' not found in ${ctx.label === "store" ? "the store" : `agent '${ctx.label}'`}${close.length > 0 ? `; did you mean '${close[0]}'?` : ""}`,
      promptName: name.slice(0, 1000),
      scope: ctx.label,
      suggestions: close
    })
  }
  return { actor: ctx.actors()[view.service_name]!, name: view.original_name }
}

/** The live connection of a service, or ServiceUnavailable. */
const connectionOf = (actor: ServiceActorRef): McpConnection => {
  const snapshot = actor.getSnapshot()
  const status = statusOf(snapshot)
  const connection = snapshot.context.connection
  if (isConnected(status) && connection !== undefined) return connection
  throw serviceUnavailable(snapshot)
}

export type CatalogError = ResourceNotFound | PromptNotFound | ServiceUnavailable | UpstreamError | ValidationError | ToolTimeout | CredentialsRequired | TooMany | ClusterUnavailable

/** What an upstream request is, for its failures and its span. */
interface Subject {
  readonly name: string
  readonly field: string
  readonly uri?: string
  readonly sentUri?: string
  /** The MCP method sent, and its span's target and attributes (the upstream's own names). */
  readonly method: string
  readonly target?: string | undefined
  readonly attributes?: SpanAttributes | undefined
}

/**
 * Runs one upstream request of a service; interrupted, it aborts the request. Tracing on, the
 * request has its client span (src/runtime/upstream-span.ts) under the span of the request being
 * served (`requestSpan`: a REST route's, or an MCP method's, set by the face), its context sent in
 * the request's `_meta`.
 */
const upstream = <A>(
  ctx: ScopeContext,
  resolve: () => { readonly actor: ServiceActorRef },
  run: (connection: McpConnection, signal: AbortSignal, meta: Record<string, string> | undefined) => Promise<A>,
  subject: Subject,
  owner?: string | undefined
): Effect.Effect<A, CatalogError> =>
  Effect.suspend(() => {
    let actor: ServiceActorRef
    try {
      actor = resolve().actor
    } catch (e) {
      return Effect.fail(e as CatalogError)
    }
    // A `per_user` service: the caller's own connection (src/runtime/per-user-request.ts), never the shared one.
    if (perUserOf(actor.getSnapshot().context.definition) !== undefined) return asPrincipal(ctx, actor, run, subject, owner)
    let connection: McpConnection
    try {
      connection = connectionOf(actor)
    } catch (e) {
      return Effect.fail(e as CatalogError)
    }
    const tracer = ctx.host.tracer
    if (!tracer.enabled) return sent(ctx, actor, connection, run, subject, undefined)
    return Effect.flatMap(FiberRef.get(requestSpan), (parent) => {
      const traced = openUpstreamSpan(tracer, parent, {
        method: subject.method,
        target: subject.target,
        scope: ctx.label,
        serviceName: actor.getSnapshot().context.name,
        connection,
        attributes: subject.attributes
      })
      const answered: { code?: number | undefined } = {}
      return Effect.onExit(sent(ctx, actor, connection, run, subject, traced.meta, answered), (exit) => Effect.sync(() => traced.end(exit, answered.code)))
    })
  })

/**
 * The request of `upstream` on a `per_user` service, for the caller's principal: its own connection
 * (here, or on the replica that runs the service), refused CredentialsRequired without a credential.
 * Not traced as a span of its own (the request's span covers it).
 */
const asPrincipal = <A>(
  ctx: ScopeContext,
  actor: ServiceActorRef,
  run: (connection: McpConnection, signal: AbortSignal, meta: Record<string, string> | undefined) => Promise<A>,
  subject: Subject,
  owner: string | undefined,
  /** A subscription: holds the connection once the request succeeded (src/runtime/user-credentials.ts). */
  hold?: ConnectionHold | undefined,
  /** The caller's credential check shared with its other requests made together (a listen's URIs). */
  checks?: CredentialChecks | undefined
): Effect.Effect<A, CatalogError> =>
  Effect.flatMap(
    Effect.promise((signal) => {
      const deadline = performance.now() + CATALOG_REQUEST_TIMEOUT_MS
      const what = `${subject.method} ${subject.name.slice(0, 200)}`
      return requestAsPrincipal(ctx.host.credentials, actor, owner, { remaining: () => Math.max(0, deadline - performance.now()), signal, gate: ctx.host.waiters, subject: what, hold, checks }, (c) => run(c, signal, undefined))
    }),
    (exit): Effect.Effect<A, CatalogError> => {
      if (Exit.isSuccess(exit)) return Effect.succeed(exit.value)
      const failure = Cause.failureOption(exit.cause)
      if (Option.isNone(failure)) return Effect.failCause(exit.cause as Cause.Cause<never>)
      const e = failure.value
      if (e instanceof NotConnected) return Effect.fail(serviceUnavailable(e.snapshot))
      if (e instanceof McpRequestError) return classified(ctx, actor, e, subject)
      return Effect.fail(e)
    }
  )

/** The request of `upstream`, sent on `connection`, its failures classified once. */
const sent = <A>(
  ctx: ScopeContext,
  actor: ServiceActorRef,
  connection: McpConnection,
  run: (connection: McpConnection, signal: AbortSignal, meta: Record<string, string> | undefined) => Promise<A>,
  subject: Subject,
  meta: Record<string, string> | undefined,
  /** Given the upstream's JSON-RPC error code, for the request's span. */
  answered?: { code?: number | undefined }
): Effect.Effect<A, CatalogError> =>
  Effect.tryPromise({ try: (signal) => run(connection, signal, meta), catch: (e) => e }).pipe(
    Effect.catchAll((e) => {
      if (!(e instanceof McpRequestError)) return Effect.die(e)
      if (answered !== undefined && e.kind === "protocol") answered.code = e.code
      // A broken connection counts as a failed health check.
      if (e.kind === "transport") actor.send({ type: "HEALTH_REPORT", ok: false, error: e.message })
      return classified(ctx, actor, e, subject)
    })
  )

/** A request's failure, classified once (src/runtime/failures.ts); interrupted when it was aborted. */
const classified = (ctx: ScopeContext, actor: ServiceActorRef, e: McpRequestError, subject: Subject): Effect.Effect<never, CatalogError> => {
  const serviceName = actor.getSnapshot().context.name
  const failure = requestFailure(e, {
    kind: "catalog",
    serviceName,
    name: subject.name,
    field: subject.field,
    uri: subject.uri,
    sentUri: subject.sentUri,
    scope: ctx.label,
    timeoutSeconds: CATALOG_REQUEST_TIMEOUT_MS / 1000
  })
  return failure === undefined ? Effect.interrupt : Effect.fail(failure)
}

const checkUri = (uri: string): Effect.Effect<void, ValidationError> =>
  uri.length === 0 || uri.length > MAX_URI_LENGTH
    ? Effect.fail(ValidationError.of([{ field: "uri", problem: `must be 1 to ${MAX_URI_LENGTH} characters` }]))
    : Effect.void

/**
 * How a read or a prompt answers its server's requests for input (elicitation, sampling; a 2025
 * server's own requests, a 2026-07-28 server's `input_required`): the caller's `relay`, as a tool
 * call's; without one they are declined, saying why.
 */
export interface CatalogInput {
  readonly relay?: UpstreamRequestRelay | undefined
  /** The caller's owner digest: whose own connection a `per_user` service's request uses (none: refused CredentialsRequired). */
  readonly owner?: string | undefined
}

/** The relay of a read or prompt whose caller cannot answer (REST, the library). */
const declinedHere =
  (done: string): UpstreamRequestRelay =>
  (request) =>
    Promise.reject(
      mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the ${done} through the REST API, which cannot answer it; use an MCP client that declares the capability`)
    )
const declinedRead = declinedHere("resource was read")
const declinedPrompt = declinedHere("prompt was asked for")

/** resources/read, routed to the resource's service; contents as the upstream sent them. */
export const readResource = (ctx: ScopeContext, uri: string, input: CatalogInput = {}): Effect.Effect<ReadResourceResult, CatalogError> =>
  Effect.zipRight(
    checkUri(uri),
    Effect.suspend(() => {
      let target: ResourceTarget
      try {
        target = resolveResource(ctx, uri)
      } catch (e) {
        return Effect.fail(e as ResourceNotFound)
      }
      const hooks = { relay: input.relay ?? declinedRead }
      return upstream(ctx, () => target, (c, signal, meta) => c.readResource(target.uri, { timeoutMs: CATALOG_REQUEST_TIMEOUT_MS, signal, hooks, meta }), {
        name: uri,
        field: "uri",
        uri,
        sentUri: target.uri,
        method: "resources/read",
        attributes: { "mcp.resource.uri": target.uri }
      }, input.owner)
    })
  )

/** Whether a service takes each caller's own credential (`per_user`): its subscriptions are then each principal's. */
export const isPerUser = (actor: ServiceActorRef): boolean => perUserOf(actor.getSnapshot().context.definition) !== undefined

/**
 * resources/subscribe on a `per_user` service for the caller's principal (`owner`: a 2025
 * session's, a listen stream's): sent on the principal's own connection, refused
 * CredentialsRequired without a credential as a read is, and `hold` then holds that connection
 * (src/runtime/user-credentials.ts `ConnectionHold`). Answers the connection, whose
 * `notifications/resources/updated` are that principal's alone. `checks`: the credential check
 * shared by the subscriptions a listen makes together (src/runtime/per-user-request.ts).
 */
export const subscribeAsPrincipal = (
  ctx: ScopeContext,
  target: ResourceTarget,
  owner: string | undefined,
  hold: ConnectionHold,
  checks?: CredentialChecks | undefined
): Effect.Effect<McpConnection, CatalogError> =>
  asPrincipal(
    ctx,
    target.actor,
    (c, signal) => {
      // Cancelled (the subscription dropped while being made): the upstream may have taken the
      // subscribe before the cancel; the hold's owner unsubscribes it (unless the subscription is
      // being made again, and in order with the subscribes of its key).
      const undoIfCancelled = () => {
        if (signal.aborted) hold.onUnwanted(c)
      }
      return c.subscribeResource(target.uri, { timeoutMs: CATALOG_REQUEST_TIMEOUT_MS, signal }).then(
        () => {
          undoIfCancelled()
          return c
        },
        (e: unknown) => {
          undoIfCancelled()
          throw e
        }
      )
    },
    { name: target.uri, field: "uri", uri: target.uri, method: "resources/subscribe" },
    owner,
    hold,
    checks
  )

/**
 * A read or a prompt as a held call runs it (src/runtime/input-required.ts): its upstream's
 * requests for input go to the held call's relay; how it ended is the held call's end.
 */
export const heldCatalogRun =
  <A>(request: (input: CatalogInput) => Effect.Effect<A, CatalogError>, owner?: string | undefined): HeldRun<Exit.Exit<A, CatalogError>> =>
  (hooks, signal) =>
    runToExit(request({ relay: hooks.relay, owner }), signal)

/** prompts/get, routed to the prompt's service; input as for readResource. */
export const getPrompt = (ctx: ScopeContext, name: string, args: Readonly<Record<string, string>> = {}, input: CatalogInput = {}): Effect.Effect<GetPromptResult, CatalogError> =>
  Effect.suspend(() => {
    let target: { actor: ServiceActorRef; name: string }
    try {
      target = resolvePrompt(ctx, name)
    } catch (e) {
      return Effect.fail(e as PromptNotFound)
    }
    const hooks = { relay: input.relay ?? declinedPrompt }
    return upstream(ctx, () => target, (c, signal, meta) => c.getPrompt(target.name, { ...args }, { timeoutMs: CATALOG_REQUEST_TIMEOUT_MS, signal, hooks, meta }), {
      name,
      field: "arguments",
      method: "prompts/get",
      target: target.name,
      attributes: { "gen_ai.prompt.name": target.name }
    }, input.owner)
  })

/**
 * completion/complete, routed by its reference: `ref/prompt` by prompt name, `ref/resource` by
 * template URI (the exposed one, prefixed or not); the upstream gets its own names.
 */
export const complete = (ctx: ScopeContext, params: CompleteParams, owner?: string | undefined): Effect.Effect<CompleteResult, CatalogError> =>
  Effect.suspend(() => {
    const ref = params.ref
    let actor: ServiceActorRef
    let upstreamRef: CompleteParams["ref"]
    if (ref.type === "ref/prompt") {
      try {
        const target = resolvePrompt(ctx, ref.name)
        actor = target.actor
        upstreamRef = { ...ref, name: target.name }
      } catch (e) {
        return Effect.fail(e as PromptNotFound)
      }
    } else {
      const view = resourceTemplateViews(ctx).find((t) => t.uriTemplate === ref.uri) ?? resourceViews(ctx).find((r) => r.uri === ref.uri)
      if (view === undefined) return Effect.fail(notFound(ctx, ref.uri))
      actor = ctx.actors()[view.service_name]!
      upstreamRef = { ...ref, uri: "original_uri_template" in view ? view.original_uri_template : view.original_uri }
    }
    return upstream(ctx, () => ({ actor }), (c, signal, meta) => c.complete({ ...params, ref: upstreamRef }, { timeoutMs: CATALOG_REQUEST_TIMEOUT_MS, signal, meta }), {
      name: ref.type === "ref/prompt" ? ref.name : ref.uri,
      field: "argument",
      method: "completion/complete"
    }, owner)
  })
