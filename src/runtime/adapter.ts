/**
 * Supplies the service machine's side effects (src/machines/service.ts) with real MCP
 * connections (src/mcp). It also owns every connection it opens: `closeAll()` ends whatever is
 * still open when the store stops, including a connection that an aborted attempt created.
 * Each connection is opened with the store's message size limit, and as its service's work
 * (src/runtime/process-guard.ts), so that an uncaught error from it is logged with the service's name.
 * The supervisors' `reportCrash` (src/machines/supervisor.ts) is supplied here too: a crash is an error line.
 */
import { open } from "node:fs/promises"
import { dirname, resolve as resolvePath } from "node:path"
import { parse as parseDotenv } from "dotenv"
import { fromCallback, fromPromise } from "xstate"
import { definitionHasReferences, expandDefinition, expandOAuth, oauthHasReferences, UndefinedVariable, type Variables } from "../domain/references.js"
import { scrubText, secretValues } from "../domain/secrets.js"
import { resolveDefinition, scopeLabel, type ResolvedDefinition, type Scope } from "../domain/service-definition.js"
import { connect, eraSuspect } from "../mcp/connect.js"
import type { UpstreamPolicy } from "../mcp/upstream-policy.js"
import { McpRequestError, type Catalog, type McpConnection, type ProcessLedger, type ToolInfo } from "../mcp/types.js"
import { Cancel } from "../domain/cancellation.js"
import { spaced } from "../domain/spaced.js"
import { inService } from "./process-guard.js"
import { log } from "../logging/log.js"
import type { CrashReport } from "../machines/supervisor.js"
import { oauthConfigOf, serviceKey, type OAuthConfig, type OAuthManager } from "./upstream-oauth.js"
import type { ToolPins } from "./tool-pins.js"
import type { UserCredential } from "../config/credentials-file.js"
import {
  serviceMachine,
  type CheckInput,
  type ConnectInput,
  type ConnectionCommand,
  type ConnectOutput,
  type ConnectionInput,
  type ListedCatalog,
  type ListedTools,
  type PinOutcome,
  type ServiceEvent
} from "../machines/service.js"

/** How the registry's connections are opened. */
export interface ConnectionOptions {
  /** The largest message read from an upstream (`StoreLimits.maxMessageBytes`); the default is 16 MiB. */
  readonly maxMessageBytes?: number | undefined
  /** The services file's folder: an `envFile` path is relative to it (the working directory when not given). */
  readonly servicesDir?: string | undefined
  /** Where remote services may point (src/mcp/upstream-policy.ts); metadata addresses refused by default. */
  readonly upstream?: UpstreamPolicy | undefined
  /** The variables `${VAR}` references are expanded from (the store's environment by default). */
  readonly environment?: Variables | undefined
  /** Where local services' process groups are noted, for the next store to end if this one is killed. */
  readonly processes?: ProcessLedger | undefined
}

/** The largest `envFile` read: a services file cannot make the store read a huge file into memory. */
export const ENV_FILE_MAX_BYTES = 64 * 1024

/** A connect failure no retry can mend (a bad definition, an unset variable): the service goes unreachable with a hint. */
const permanent = (message: string, hint: string) => new McpRequestError("transport", message, undefined, undefined, { permanent: true, hint })

/** The variables of a dotenv file, at most `ENV_FILE_MAX_BYTES` of it. */
const readEnvFile = async (path: string): Promise<Record<string, string>> => {
  let handle
  try {
    handle = await open(path, "r")
    const { size, isFile } = await handle.stat().then((st) => ({ size: st.size, isFile: st.isFile() }))
    if (!isFile) throw permanent(`envFile ${JSON.stringify(path)} is not a file`, "fix \"envFile\" in the service's definition")
    if (size > ENV_FILE_MAX_BYTES) throw permanent(`envFile ${JSON.stringify(path)} is larger than ${ENV_FILE_MAX_BYTES} bytes`, "keep only the service's variables in its envFile")
    const buffer = Buffer.alloc(size)
    await handle.read(buffer, 0, size, 0)
    return parseDotenv(buffer)
  } catch (e) {
    if (e instanceof McpRequestError) throw e
    throw permanent(`envFile ${JSON.stringify(path)} cannot be read: ${(e as NodeJS.ErrnoException).code ?? describe(e)}`, "create the envFile or fix its path (relative to the services file's folder)")
  } finally {
    await handle?.close()
  }
}

/**
 * A resolved definition, and its `oauth` client id and secret, with their `${VAR}` references
 * expanded (src/domain/references.ts) from the store's environment and the service's envFile; a
 * variable that is not set and has no default is a permanent failure naming it (never a value).
 */
const expanded = async (
  def: ResolvedDefinition,
  oauth: OAuthConfig | undefined,
  options: ConnectionOptions
): Promise<{ readonly def: ResolvedDefinition; readonly oauth: OAuthConfig | undefined }> => {
  if (def.envFile === undefined && !definitionHasReferences(def) && !oauthHasReferences(oauth)) return { def, oauth }
  const environment = options.environment ?? process.env
  const vars: Variables =
    def.envFile === undefined ? environment : { ...environment, ...(await readEnvFile(resolvePath(options.servicesDir ?? ".", def.envFile))) }
  let out: ResolvedDefinition
  let outOAuth = oauth
  try {
    out = expandDefinition(def, vars)
    if (oauth !== undefined) outOAuth = expandOAuth(oauth, vars)
  } catch (e) {
    if (!(e instanceof UndefinedVariable)) throw e
    throw permanent(e.message, `set ${e.variable} in the store's environment or in the service's envFile, or give a default: \${${e.variable}:-value}`)
  }
  if (out.kind === "remote" && !(URL.canParse(out.url) && /^https?:$/.test(new URL(out.url).protocol))) {
    throw permanent("url is not an http(s) URL once its variables are expanded", "fix the url or the variables it refers to")
  }
  return { def: out, oauth: outOAuth }
}

/** An error with the definition's secret values scrubbed from its message and hint (src/domain/secrets.ts). */
const scrubbed = (e: unknown, secrets: ReadonlyArray<string>): unknown => {
  if (!(e instanceof Error)) return e
  const message = scrubText(e.message, secrets)
  if (e instanceof McpRequestError) {
    const hint = e.hint === undefined ? undefined : scrubText(e.hint, secrets)
    if (message === e.message && hint === e.hint) return e
    return new McpRequestError(e.kind, message, e.code, e.data, { permanent: e.permanent, hint, httpStatus: e.httpStatus })
  }
  return message === e.message ? e : new Error(message)
}

/**
 * A connection whose failures, close reasons and stderr lines never quote a secret of its
 * definition: an upstream that echoes a header back, or a process that prints its environment,
 * shows `***` in last_error, histories, events, records and logs.
 */
export const scrubbedConnection = (connection: McpConnection, secrets: ReadonlyArray<string>): McpConnection => {
  if (secrets.length === 0) return connection
  const scrub = (e: unknown): never => {
    throw scrubbed(e, secrets)
  }
  // Every method of the connection, whatever it is: a promise it returns fails scrubbed. Only the
  // two that hand out text themselves are written out. Generic, so a method added to McpConnection
  // is covered without a line here.
  const special: Partial<McpConnection> = {
    onClose: (listener) => connection.onClose((reason) => listener(scrubText(reason, secrets))),
    stderrTail: () => connection.stderrTail().map((line) => scrubText(line, secrets))
  }
  const wrapped = new Map<PropertyKey, unknown>()
  return new Proxy(connection, {
    get(target, key) {
      if (Object.hasOwn(special, key)) return special[key as keyof McpConnection]
      const value: unknown = Reflect.get(target, key)
      if (typeof value !== "function") return value
      let fn = wrapped.get(key)
      if (fn === undefined) {
        fn = (...args: unknown[]) => {
          const out: unknown = Reflect.apply(value, target, args)
          return out instanceof Promise ? out.catch(scrub) : out
        }
        wrapped.set(key, fn)
      }
      return fn
    }
  })
}

/**
 * Connections opened and not yet closed, with one close promise each (close is idempotent), and the
 * connection attempts under way, each under its service's label (`scope/name`): `drain` waits until
 * a service has nothing open or opening (replica mode hands a service over only then).
 */
export class ConnectionRegistry {
  private readonly open = new Map<McpConnection, Promise<void> | undefined>()
  private readonly labels = new Map<McpConnection, string>()
  private readonly attempts = new Map<string, Set<Promise<unknown>>>()

  constructor(readonly options: ConnectionOptions = {}) {}

  track(connection: McpConnection, label?: string): McpConnection {
    this.open.set(connection, undefined)
    if (label !== undefined) this.labels.set(connection, label)
    return connection
  }

  /** Notes a connection attempt of a service (its promise settles once whatever it opened is closed or tracked). */
  attempting<T>(label: string, attempt: Promise<T>): Promise<T> {
    let set = this.attempts.get(label)
    if (set === undefined) this.attempts.set(label, (set = new Set()))
    set.add(attempt)
    const done = () => {
      set.delete(attempt)
      if (set.size === 0 && this.attempts.get(label) === set) this.attempts.delete(label)
    }
    attempt.then(done, done)
    return attempt
  }

  /** Closes a connection once; every caller gets the same promise. */
  close(connection: McpConnection | undefined): Promise<void> {
    if (connection === undefined) return Promise.resolve()
    const pending = this.open.get(connection)
    if (pending) return pending
    const closing = connection.close().catch(() => undefined).finally(() => {
      this.open.delete(connection)
      this.labels.delete(connection)
    })
    this.open.set(connection, closing)
    return closing
  }

  /** Resolves once a service has no attempt under way and no connection open (closing what is still open). */
  async drain(label: string): Promise<void> {
    for (;;) {
      const attempts = [...(this.attempts.get(label) ?? [])]
      const open = [...this.labels].filter(([, l]) => l === label).map(([c]) => c)
      if (attempts.length === 0 && open.length === 0) return
      await Promise.allSettled([...attempts, ...open.map((c) => this.close(c))])
    }
  }

  /** Closes everything still open (store shutdown). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.open.keys()].map((c) => this.close(c)))
  }

  get size(): number {
    return this.open.size
  }

  /** Open connections that run a local process. */
  processCount(): number {
    let n = 0
    for (const c of this.open.keys()) if (c.pid !== undefined) n += 1
    return n
  }
}

/** The machines' `reportCrash` action: a service actor's crash is logged as an error (with its stack). */
export const logCrash = (_: unknown, report: CrashReport | undefined): void => {
  if (report === undefined) return
  log.error(`service actor ${report.actorId} crashed (${report.attempt}): ${report.message}`, { event: "crashed", attempt: report.attempt }, report.error)
}

/** The label a service's connections are tracked under (`ConnectionRegistry.drain`). */
export const connectionLabel = (scope: Scope, name: string): string => `${scopeLabel(scope)}\u0000${name}`

/**
 * The least time between two list refreshes a server's list_changed notifications start (ms). Each
 * one lists again at once (a list under way starts over), so a server that announces a change after
 * every list had the store listing in a loop, a core's worth of CPU for one hostile service.
 */
export const LIST_CHANGED_SPACING_MS = 1_000

const describe = (e: unknown): string => (e instanceof Error ? e.message : String(e))

/**
 * A tool list judged against the service's pins (src/runtime/tool-pins.ts); a failure to read or
 * write them fails the list (never taken unjudged). Without pins (a store made without them) nothing is held.
 */
const judged = async (pins: ToolPins | undefined, input: Pick<CheckInput, "scope" | "name" | "definition" | "heldTools">, tools: ReadonlyArray<ToolInfo>): Promise<PinOutcome | undefined> => {
  if (pins === undefined || input.scope === undefined || input.name === undefined || input.definition === undefined) return undefined
  try {
    return await pins.check(input.scope, input.name, input.definition, tools, input.heldTools ?? [])
  } catch (e) {
    throw new McpRequestError("transport", `the tool list could not be checked against its pins: ${describe(e)}`)
  }
}

/** The service machine with real MCP side effects; every connection is tracked by `registry`. */
export const liveServiceMachine = (registry: ConnectionRegistry, clientName = "mcp-store", oauth?: OAuthManager, pins?: ToolPins) => {
  /** One connection attempt: the definition resolved and expanded, connected, its tools and catalog listed. */
  const connectOnce = async (input: ConnectInput, signal: AbortSignal): Promise<ConnectOutput> => {
    let resolved: ReturnType<typeof resolveDefinition>
    try {
      resolved = resolveDefinition(input.definition)
    } catch (e) {
      // A hand-edited definition that is not usable: no retry can mend it, only an edit.
      throw new McpRequestError("transport", `invalid definition: ${describe(e)}`, undefined, undefined, {
        permanent: true,
        hint: "fix the service's definition (update_service, or the services file)"
      })
    }
    const { maxMessageBytes, upstream, processes } = registry.options
    const givenOAuth = resolved.kind === "remote" ? oauthConfigOf((input.definition as Record<string, unknown>)["oauth"]) : undefined
    // Without references nothing is awaited: the connection's time-out starts in the same turn as the machine's (as before).
    const { def: target, oauth: oauthConfig } =
      resolved.envFile === undefined && !definitionHasReferences(resolved) && !oauthHasReferences(givenOAuth)
        ? { def: resolved, oauth: givenOAuth }
        : await expanded(resolved, givenOAuth, registry.options)
    const secrets = secretValues({ ...target, oauth_client_secret: oauthConfig?.client_secret })
    // A remote service's token source (src/runtime/upstream-oauth.ts): idle until an upstream asks for OAuth.
    const auth = target.kind === "remote" && oauth !== undefined ? oauth.forService(input.scope, input.name, target.url, oauthConfig, input.definition.per_user?.oauth === true) : undefined
    const opened = await inService({ name: input.name, scope: scopeLabel(input.scope) }, () =>
      connect(target, {
        timeoutMs: input.timeoutMs,
        signal,
        clientName,
        service: serviceKey(input.scope, input.name),
        auth,
        prior: input.prior,
        processes,
        ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
        ...(upstream !== undefined ? { upstream } : {})
      })
    ).catch((e: unknown) => {
      throw scrubbed(e, secrets)
    })
    const connection = registry.track(scrubbedConnection(opened, secrets), connectionLabel(input.scope, input.name))
    try {
      if (signal.aborted) throw new McpRequestError("aborted", "connection attempt cancelled")
      const tools = await connection.listTools({ timeoutMs: input.timeoutMs, signal })
      const pinOutcome = await judged(pins, input, tools)
      // Resources and prompts (only what the server declared). A server whose tools work is
      // connected even when these fail: the failure is noted, and the lists are asked again later.
      let catalog: Catalog | undefined
      let catalogError: string | undefined
      try {
        catalog = await connection.listCatalog({ timeoutMs: input.timeoutMs, signal })
      } catch (e) {
        if (signal.aborted) throw e
        catalogError = describe(e)
      }
      // A result that arrives after the actor stopped is dropped by XState: release it here.
      if (signal.aborted) throw new McpRequestError("aborted", "connection attempt cancelled")
      return { connection, tools, catalog, catalogError, toolsTtlMs: connection.listTtlMs?.tools, catalogTtlMs: connection.listTtlMs?.catalog, pins: pinOutcome }
    } catch (e) {
      await registry.close(connection)
      throw e
    }
  }
  /**
   * A connection attempt with the era the last connection found; when that fails in a way a changed
   * server explains (src/mcp/connect.ts, `eraSuspect`), the era is negotiated afresh at once.
   */
  const connectWithEra = async (input: ConnectInput, signal: AbortSignal): Promise<ConnectOutput> => {
    if (input.prior === undefined) return connectOnce(input, signal)
    try {
      return await connectOnce(input, signal)
    } catch (e) {
      if (signal.aborted || !eraSuspect(e)) throw e
      return connectOnce({ ...input, prior: undefined }, signal)
    }
  }
  return serviceMachine.provide({
    actors: {
      connect: fromPromise<ConnectOutput, ConnectInput>(({ input, signal }) => registry.attempting(connectionLabel(input.scope, input.name), connectWithEra(input, signal))),
      holdConnection: fromCallback<ConnectionCommand, ConnectionInput>(({ input, sendBack, receive }) => {
        const send = (event: ServiceEvent) => sendBack(event)
        const offClose = input.connection.onClose((reason) =>
          send({ type: "TRANSPORT_CLOSED", reason: `transport closed: ${reason}` })
        )
        const toolsChanged = spaced(LIST_CHANGED_SPACING_MS, () => send({ type: "TOOLS_CHANGED" }))
        const catalogChanged = spaced(LIST_CHANGED_SPACING_MS, () => send({ type: "CATALOG_CHANGED" }))
        const offTools = input.watchTools ? input.connection.onToolsChanged(toolsChanged.notify) : () => undefined
        const offCatalog = input.watchTools ? input.connection.onCatalogChanged(catalogChanged.notify) : () => undefined
        // The health check running, if any: withdrawn by CANCEL_CHECK, a new check, or the end of the connection.
        let check: Cancel | undefined
        const withdraw = () => {
          check?.abort()
          check = undefined
        }
        receive((command) => {
          withdraw()
          if (command.type !== "CHECK_HEALTH") return
          const abort = (check = new Cancel())
          const settled = () => {
            if (abort.aborted) return false
            check = undefined
            return true
          }
          input.connection.ping({ timeoutMs: command.timeoutMs, signal: abort }).then(
            (ms) => {
              if (settled()) send({ type: "HEALTH_REPORT", ok: true, responseTimeMs: ms })
            },
            (e: unknown) => {
              if (!settled()) return
              if (e instanceof McpRequestError && e.kind === "session_expired") {
                send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
              } else {
                send({ type: "HEALTH_REPORT", ok: false, error: describe(e) })
              }
            }
          )
        })
        return () => {
          withdraw()
          offClose()
          offTools()
          offCatalog()
          toolsChanged.stop()
          catalogChanged.stop()
          void registry.close(input.connection)
        }
      }),
      listTools: fromPromise<ListedTools, CheckInput>(async ({ input, signal }) => {
        const tools = await input.connection.listTools({ timeoutMs: input.timeoutMs, signal })
        return { tools, ttlMs: input.connection.listTtlMs?.tools, pins: await judged(pins, input, tools) }
      }),
      listCatalog: fromPromise<ListedCatalog, CheckInput>(async ({ input, signal }) => {
        const catalog = await input.connection.listCatalog({ timeoutMs: input.timeoutMs, signal })
        return { catalog, ttlMs: input.connection.listTtlMs?.catalog }
      }),
      closeConnection: fromPromise<void, { readonly connection: McpConnection | undefined }>(({ input }) =>
        registry.close(input.connection)
      )
    }
  })
}

/** One principal's own values over a `per_user` service's definition (README, Per-user credentials). */
export type PrincipalValues = UserCredential

/**
 * A connection of a `per_user` service opened with one principal's values merged over the
 * definition's (its headers on a remote service, its environment on a local one: a process of its
 * own), tracked by `registry` under the service's label; no OAuth token of the service's own is
 * sent on it. A service with `per_user.oauth` sends the principal's own bearer token instead (its
 * token source from `oauth`, refreshed before expiry and on a 401). The principal's values are
 * secrets: scrubbed from every failure and close reason.
 */
export const openPrincipalConnection = async (
  registry: ConnectionRegistry,
  target: { readonly scope: Scope; readonly name: string; readonly definition: Parameters<typeof resolveDefinition>[0] },
  values: PrincipalValues,
  options: { readonly clientName: string; readonly timeoutMs: number; readonly signal: AbortSignal; readonly oauth?: { readonly manager: OAuthManager; readonly principal: string } | undefined }
): Promise<McpConnection> => {
  const resolved = resolveDefinition(target.definition)
  const ownOAuth = resolved.kind === "remote" && target.definition.per_user?.oauth === true
  const { def, oauth: oauthConfig } = await expanded(resolved, ownOAuth ? oauthConfigOf((target.definition as Record<string, unknown>)["oauth"]) : undefined, registry.options)
  // The principal's own token source (never the service's, never another principal's).
  const auth = ownOAuth && def.kind === "remote" && options.oauth !== undefined ? options.oauth.manager.forPrincipal(target.scope, target.name, def.url, oauthConfig, options.oauth.principal) : undefined
  const own: ResolvedDefinition = def.kind === "remote" ? { ...def, headers: { ...def.headers, ...values.headers } } : { ...def, env: { ...def.env, ...values.env } }
  const secrets = secretValues({ ...own, oauth_client_secret: oauthConfig?.client_secret })
  const { maxMessageBytes, upstream, processes } = registry.options
  const label = connectionLabel(target.scope, target.name)
  const opened = await registry.attempting(
    label,
    inService({ name: target.name, scope: scopeLabel(target.scope) }, () =>
      connect(own, {
        timeoutMs: options.timeoutMs,
        signal: options.signal,
        clientName: options.clientName,
        service: serviceKey(target.scope, target.name),
        auth,
        processes,
        ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
        ...(upstream !== undefined ? { upstream } : {})
      })
    ).catch((e: unknown) => {
      throw scrubbed(e, secrets)
    })
  )
  return registry.track(scrubbedConnection(opened, secrets), label)
}
