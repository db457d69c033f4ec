// The `mcp-store run api` command line: precedence of sources, environment names, the standalone
// config file, and errors that name the option.
import { mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterEach, beforeEach, describe, expect, it } from "vitest"
import { execFile } from "node:child_process"
import { existsSync, mkdirSync, readdirSync } from "node:fs"
import { CommandLineExit, parseCommandLine } from "../../src/cli/command-line.js"
import { runAuth } from "../../src/cli/auth-command.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { runOAuthClients } from "../../src/cli/oauth-clients-command.js"
import { storeScript } from "../support/index.js"
import { OptionsError } from "../../src/config/options.js"

let dir: string
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "mcp-store-cli-"))
})
afterEach(async () => {
  await rm(dir, { recursive: true, force: true })
})

const quiet = { writeOut: () => undefined, writeErr: () => undefined }
const parse = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv = {}) =>
  parseCommandLine(["run", "api", ...args], env, { ...quiet, cwd: dir })

const rejection = async (p: Promise<unknown>): Promise<OptionsError> => {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err
  )
  expect(e).toBeInstanceOf(OptionsError)
  return e as OptionsError
}

const standalone = async (content: unknown): Promise<string> => {
  const path = join(dir, "standalone.json")
  await writeFile(path, typeof content === "string" ? content : JSON.stringify(content))
  return path
}

describe("parseCommandLine", () => {
  it("uses the defaults with no options", async () => {
    const { server, store } = await parse([])
    expect(server).toEqual({
      host: "127.0.0.1",
      port: 18200,
      reload: false,
      logLevel: "info",
      logFormat: "text",
      autoOpenBrowser: false,
      showStartupInfo: true,
      apiKey: undefined,
      localServices: true,
      allowedHosts: [],
      allowedOrigins: [],
      allowRemoteLocalServices: false,
      denyByDefault: false,
      toolSearchScopes: [],
      alwaysVisibleTools: [],
      maxEventStreams: 100,
      maxMcpSessions: 1000,
      mcpSessionIdleSeconds: 1800,
      maxBodyBytes: 1048576,
      maxConnections: 1000
    })
    expect(store.mcpConfigFile).toBe(join(dir, "mcp.json"))
    expect(store.debug).toBe(false)
    expect(store.toolRecordMaxFileSize).toBe(30)
    expect(store.toolRecordRetentionDays).toBe(7)
    expect(store.monitoring.health_check_seconds).toBe(30)
  })

  it("reads every option from the command line", async () => {
    const { server, store } = await parse([
      "--host",
      "127.0.0.1",
      "--port",
      "9000",
      "--reload",
      "--log-level",
      "warning",
      "--open",
      "--no-startup-info",
      "--config",
      "data/services.json",
      "--debug",
      "--tool-record-max-file-size",
      "-1",
      "--tool-record-retention-days",
      "30",
      "--monitoring",
      '{"health_check_seconds": 0.5, "enable_reconnection": false}',
      "--api-key",
      "secret",
      "--no-local-services",
      "--allowed-hosts",
      "store.lan,store.lan:9000",
      "--allowed-origins",
      "https://dash.example",
      "--allow-remote-local-services",
      "--deny-by-default",
      "--max-event-streams",
      "5",
      "--max-mcp-sessions",
      "6",
      "--mcp-session-idle-seconds",
      "60",
      "--max-body-bytes",
      "2048",
      "--max-connections",
      "50",
      "--max-message-bytes",
      "4096",
      "--max-services",
      "20",
      "--max-services-per-request",
      "3",
      "--max-waiters",
      "30",
      "--max-held-calls",
      "5",
      "--max-call-seconds",
      "90",
      "--tool-record-max-value-bytes",
      "1000",
      "--max-async-calls",
      "4",
      "--max-async-results",
      "40",
      "--async-result-retention-seconds",
      "600",
      "--async-results-max-bytes",
      "100000",
      "--max-approvals",
      "17",
      "--max-approvals-per-key",
      "2",
      "--approval-timeout",
      "45",
      "--per-user-connections",
      "3",
      "--per-user-idle-seconds",
      "0.5",
      "--upstream-allow",
      "10.0.0.0/8, *.lan",
      "--upstream-allow-metadata"
    ])
    expect(server).toEqual({
      host: "127.0.0.1",
      port: 9000,
      reload: true,
      logLevel: "warning",
      logFormat: "text",
      autoOpenBrowser: true,
      showStartupInfo: false,
      apiKey: "secret",
      localServices: false,
      allowedHosts: ["store.lan", "store.lan:9000"],
      allowedOrigins: ["https://dash.example"],
      allowRemoteLocalServices: true,
      denyByDefault: true,
      toolSearchScopes: [],
      alwaysVisibleTools: [],
      maxEventStreams: 5,
      maxMcpSessions: 6,
      mcpSessionIdleSeconds: 60,
      maxBodyBytes: 2048,
      maxConnections: 50
    })
    expect(store.limits).toEqual({
      maxMessageBytes: 4096,
      maxServices: 20,
      maxServicesPerRequest: 3,
      maxWaiters: 30,
      maxHeldCalls: 5,
      maxCallSeconds: 90,
      toolRecordMaxValueBytes: 1000,
      maxAsyncCalls: 4,
      maxAsyncResults: 40,
      asyncResultRetentionSeconds: 600,
      asyncResultsMaxBytes: 100000,
      upstreamAllow: ["10.0.0.0/8", "*.lan"],
      upstreamAllowMetadata: true,
      maxApprovals: 17,
      maxApprovalsPerKey: 2,
      approvalTimeoutSeconds: 45,
      perUserConnections: 3,
      perUserIdleSeconds: 0.5
    })
    expect(store.mcpConfigFile).toBe(join(dir, "data", "services.json"))
    expect(store.debug).toBe(true)
    expect(store.toolRecordMaxFileSize).toBe(-1)
    expect(store.toolRecordRetentionDays).toBe(30)
    expect(store.monitoring.health_check_seconds).toBe(0.5)
    expect(store.monitoring.warning_check_seconds).toBe(0.5)
    expect(store.monitoring.enable_reconnection).toBe(false)
  })

  it("reads the built-in authorization server's flags and their variables", async () => {
    const flags = await parse(["--auth-server", "--auth-dev-loopback-clients", "--no-auth-dynamic-registration", "--public-url", "https://store.example.com"])
    expect(flags.server).toMatchObject({ authServer: true, authDevLoopbackClients: true, authDynamicRegistration: false, publicUrl: "https://store.example.com" })
    const env = await parse([], { MCPSTORE_AUTH_SERVER: "on", MCPSTORE_PUBLIC_URL: "https://store.example.com/" })
    expect(env.server).toMatchObject({ authServer: true, publicUrl: "https://store.example.com" })
    expect((await parse([])).server.authServer).toBeUndefined()
    await rejection(parse(["--public-url", "store.example.com"]))
  })

  it("takes the introspection client's id from the command line or the environment and its secret from the environment only", async () => {
    const issuer = "https://login.example.com"
    const secret = { MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET: "store-client-secret" }
    const flags = await parse(["--auth-issuer", issuer, "--auth-introspection-client-id", "mcp-store"], secret)
    expect(flags.server.authIntrospection).toEqual({ clientId: "mcp-store", clientSecret: "store-client-secret" })
    const env = await parse([], { ...secret, MCPSTORE_AUTH_ISSUER: issuer, MCPSTORE_AUTH_INTROSPECTION_CLIENT_ID: "mcp-store" })
    expect(env.server.authIntrospection).toEqual({ clientId: "mcp-store", clientSecret: "store-client-secret" })
    expect((await parse(["--auth-issuer", issuer], secret)).server.authIntrospection).toBeUndefined()
    expect((await rejection(parse(["--auth-issuer", issuer, "--auth-introspection-client-id", "mcp-store"]))).message).toMatch(/MCPSTORE_AUTH_INTROSPECTION_CLIENT_SECRET/)
    expect((await rejection(parse(["--auth-introspection-client-id", "mcp-store"], secret))).message).toMatch(/needs --auth-issuer/)
    await rejection(parse(["--auth-issuer", issuer, "--auth-introspection-client-id", "two words"], secret))
  })

  it("reads every option from its MCPSTORE_ environment variable", async () => {
    const { server, store } = await parse([], {
      MCPSTORE_HOST: "::1",
      MCPSTORE_PORT: "7000",
      MCPSTORE_RELOAD: "true",
      MCPSTORE_LOG_LEVEL: "error",
      MCPSTORE_AUTO_OPEN_BROWSER: "1",
      MCPSTORE_SHOW_STARTUP_INFO: "no",
      MCPSTORE_CONFIG: "/etc/mcp/services.json",
      MCPSTORE_DEBUG: "on",
      MCPSTORE_TOOL_RECORD_MAX_FILE_SIZE: "5",
      MCPSTORE_TOOL_RECORD_RETENTION_DAYS: "-1",
      MCPSTORE_MONITORING: '{"slow_response_ms": 250}',
      MCPSTORE_API_KEY: "k",
      MCPSTORE_LOCAL_SERVICES: "off",
      MCPSTORE_ALLOWED_HOSTS: "a.lan",
      MCPSTORE_ALLOWED_ORIGINS: "*",
      MCPSTORE_ALLOW_REMOTE_LOCAL_SERVICES: "yes",
      MCPSTORE_DENY_BY_DEFAULT: "on",
      MCPSTORE_MAX_EVENT_STREAMS: "2",
      MCPSTORE_MAX_MCP_SESSIONS: "3",
      MCPSTORE_MCP_SESSION_IDLE_SECONDS: "4",
      MCPSTORE_MAX_BODY_BYTES: "5",
      MCPSTORE_MAX_CONNECTIONS: "6",
      MCPSTORE_MAX_MESSAGE_BYTES: "7",
      MCPSTORE_MAX_SERVICES: "8",
      MCPSTORE_MAX_SERVICES_PER_REQUEST: "9",
      MCPSTORE_MAX_WAITERS: "10",
      MCPSTORE_MAX_HELD_CALLS: "12",
      MCPSTORE_MAX_CALL_SECONDS: "11",
      MCPSTORE_MAX_ASYNC_CALLS: "13",
      MCPSTORE_MAX_ASYNC_RESULTS: "14",
      MCPSTORE_ASYNC_RESULT_RETENTION_SECONDS: "15",
      MCPSTORE_ASYNC_RESULTS_MAX_BYTES: "16",
      MCPSTORE_MAX_APPROVALS: "18",
      MCPSTORE_MAX_APPROVALS_PER_KEY: "19",
      MCPSTORE_APPROVAL_TIMEOUT_SECONDS: "20",
      MCPSTORE_PER_USER_CONNECTIONS: "21",
      MCPSTORE_PER_USER_IDLE_SECONDS: "22"
    })
    expect(server).toEqual({
      host: "::1",
      port: 7000,
      reload: true,
      logLevel: "error",
      logFormat: "text",
      autoOpenBrowser: true,
      showStartupInfo: false,
      apiKey: "k",
      localServices: false,
      allowedHosts: ["a.lan"],
      allowedOrigins: ["*"],
      allowRemoteLocalServices: true,
      denyByDefault: true,
      toolSearchScopes: [],
      alwaysVisibleTools: [],
      maxEventStreams: 2,
      maxMcpSessions: 3,
      mcpSessionIdleSeconds: 4,
      maxBodyBytes: 5,
      maxConnections: 6
    })
    expect(store.limits).toEqual({
      maxMessageBytes: 7,
      maxServices: 8,
      maxServicesPerRequest: 9,
      maxWaiters: 10,
      maxHeldCalls: 12,
      maxCallSeconds: 11,
      toolRecordMaxValueBytes: 64 * 1024,
      maxAsyncCalls: 13,
      maxAsyncResults: 14,
      asyncResultRetentionSeconds: 15,
      asyncResultsMaxBytes: 16,
      upstreamAllow: [],
      upstreamAllowMetadata: false,
      maxApprovals: 18,
      maxApprovalsPerKey: 19,
      approvalTimeoutSeconds: 20,
      perUserConnections: 21,
      perUserIdleSeconds: 22
    })
    expect(store).toMatchObject({
      mcpConfigFile: "/etc/mcp/services.json",
      debug: true,
      toolRecordMaxFileSize: 5,
      toolRecordRetentionDays: -1
    })
    expect(store.monitoring.slow_response_ms).toBe(250)
  })

  it("accepts the alternative names MCPSTORE_MCP_CONFIG_FILE and MCPSTORE_OPEN, and ignores empty variables", async () => {
    const { server, store } = await parse([], { MCPSTORE_MCP_CONFIG_FILE: "x.json", MCPSTORE_OPEN: "true", MCPSTORE_PORT: "" })
    expect(store.mcpConfigFile).toBe(join(dir, "x.json"))
    expect(server.autoOpenBrowser).toBe(true)
    expect(server.port).toBe(18200)
  })

  it("refuses two names of one option that disagree", async () => {
    const e = await rejection(parse([], { MCPSTORE_CONFIG: "a.json", MCPSTORE_MCP_CONFIG_FILE: "b.json" }))
    expect(e.option).toBe("mcp_config_file")
    expect(e.message).toContain("MCPSTORE_CONFIG and MCPSTORE_MCP_CONFIG_FILE")
    await expect(parse([], { MCPSTORE_CONFIG: "a.json", MCPSTORE_MCP_CONFIG_FILE: "a.json" })).resolves.toBeDefined()
  })

  it("prefers the command line over the environment", async () => {
    const env = { MCPSTORE_PORT: "7000", MCPSTORE_RELOAD: "true", MCPSTORE_SHOW_STARTUP_INFO: "false", MCPSTORE_HOST: "h" }
    const { server } = await parse(["--port", "7001", "--no-reload", "--startup-info"], env)
    expect(server.port).toBe(7001)
    expect(server.reload).toBe(false)
    expect(server.showStartupInfo).toBe(true)
    expect(server.host).toBe("h")
  })

  it("reads a standalone config file, ignores the environment, and lets the command line win", async () => {
    const path = await standalone({
      host: "10.0.0.1",
      port: 8100,
      log_level: "debug",
      mcp_config_file: "/data/mcp.json",
      monitoring: { health_check_seconds: 3, cleanup_hours: 1 },
      api_key: "from-file"
    })
    const env = { MCPSTORE_PORT: "7000", MCPSTORE_DEBUG: "true", MCPSTORE_API_KEY: "from-env" }
    const fileOnly = await parse(["--standalone-config", path], env)
    expect(fileOnly.server).toMatchObject({ host: "10.0.0.1", port: 8100, logLevel: "debug", apiKey: "from-file" })
    expect(fileOnly.store.debug).toBe(false)
    expect(fileOnly.store.mcpConfigFile).toBe("/data/mcp.json")
    expect(fileOnly.store.monitoring.health_check_seconds).toBe(3)

    const withCli = await parse(
      ["--standalone-config", "standalone.json", "--port", "8200", "--monitoring", '{"health_check_seconds": 4}'],
      env
    )
    expect(withCli.server.port).toBe(8200)
    expect(withCli.server.host).toBe("10.0.0.1")
    expect(withCli.store.monitoring.health_check_seconds).toBe(4)
    expect(withCli.store.monitoring.cleanup_hours).toBe(1)
  })

  it("takes the standalone config file from MCPSTORE_STANDALONE_CONFIG too", async () => {
    await standalone({ port: 8300 })
    const { server } = await parse([], { MCPSTORE_STANDALONE_CONFIG: "standalone.json", MCPSTORE_PORT: "7000", MCPSTORE_HOST: "h" })
    expect(server.port).toBe(8300)
    expect(server.host).toBe("127.0.0.1")
  })

  it("refuses a bad standalone config file naming the file and the problem", async () => {
    const unknown = await rejection(parse(["--standalone-config", await standalone({ port: 1, colour: "red" })]))
    expect(unknown.option).toBe("colour")
    expect(unknown.message).toContain(join(dir, "standalone.json"))
    expect(unknown.message).toContain('unknown option "colour"')

    const wrongType = await rejection(parse(["--standalone-config", await standalone({ port: "8000" })]))
    expect(wrongType.option).toBe("port")
    expect(wrongType.message).toBe(
      `standalone config ${join(dir, "standalone.json")}: port must be an integer from 0 to 65535 (got "8000")`
    )

    const badJson = await rejection(parse(["--standalone-config", await standalone("{port: 1}")]))
    expect(badJson.option).toBe("standalone_config")
    expect(badJson.message).toContain("not valid JSON")
    // Where, and why in general words: never the text around the error (it may be a secret).
    const secret = await rejection(parse(["--standalone-config", await standalone('{\n  "api_key": s3cr3tKEY\n}')]))
    expect(secret.message).toMatch(/not valid JSON \(.*line 2, column 14\)\)$/)
    expect(secret.message).not.toContain("s3cr3t")

    const missing = await rejection(parse(["--standalone-config", "nope.json"]))
    expect(missing.option).toBe("standalone_config")
    expect(missing.message).toContain(join(dir, "nope.json"))

    const badMonitoring = await rejection(parse(["--standalone-config", await standalone({ monitoring: { cleanup_hours: -1 } })]))
    expect(badMonitoring.option).toBe("monitoring.cleanup_hours")
  })

  it.each([
    [["--port", "http"], "port", "--port: port must be an integer"],
    [["--port", "70000"], "port", "--port: port must be an integer from 0 to 65535 (got 70000)"],
    [["--host", ""], "host", "--host: host must be a non-empty string"],
    [["--log-level", "trace"], "log_level", "--log-level: log_level must be one of debug, info, warning, error"],
    [["--log-format", "bogus"], "log_format", '--log-format: log_format must be one of text, json (got "bogus")'],
    [["--config", ""], "mcp_config_file", "--config: mcp_config_file must be a non-empty string"],
    [["--tool-record-max-file-size", "0"], "tool_record_max_file_size", "--tool-record-max-file-size: tool_record_max_file_size"],
    [["--tool-record-retention-days", "-3"], "tool_record_retention_days", "--tool-record-retention-days: tool_record_retention_days"],
    [["--monitoring", "{"], "monitoring", "--monitoring: monitoring must be a JSON object"],
    [["--monitoring", "[]"], "monitoring", "--monitoring: monitoring must be an object"],
    [["--monitoring", '{"health_check_seconds": "x"}'], "monitoring.health_check_seconds", '--monitoring: monitoring.health_check_seconds must be a number > 0'],
    [["--monitoring", '{"speed": 1}'], "monitoring.speed", '--monitoring: monitoring has no key "speed"'],
    [["--api-key", " "], "api_key", "--api-key: api_key must be a non-empty string"],
    [["--standalone-config", ""], "standalone_config", "--standalone-config must be the path of a JSON file"]
  ])("refuses %j naming the option", async (args, option, message) => {
    const e = await rejection(parse(args))
    expect(e.option).toBe(option)
    expect(e.message).toContain(message)
  })

  it.each([
    ["MCPSTORE_PORT", "-1", "port"],
    ["MCPSTORE_HOST", " ", "host"],
    ["MCPSTORE_RELOAD", "sometimes", "reload"],
    ["MCPSTORE_LOG_LEVEL", "loud", "log_level"],
    ["MCPSTORE_LOG_FORMAT", "xml", "log_format"],
    ["MCPSTORE_AUTO_OPEN_BROWSER", "2", "auto_open_browser"],
    ["MCPSTORE_SHOW_STARTUP_INFO", "x", "show_startup_info"],
    ["MCPSTORE_DEBUG", "x", "debug"],
    ["MCPSTORE_TOOL_RECORD_MAX_FILE_SIZE", "lots", "tool_record_max_file_size"],
    ["MCPSTORE_TOOL_RECORD_RETENTION_DAYS", "0", "tool_record_retention_days"],
    ["MCPSTORE_MONITORING", '{"max_reconnect_attempts": 0}', "monitoring.max_reconnect_attempts"]
  ])("refuses %s=%s naming the variable and the option", async (name, value, option) => {
    const e = await rejection(parse([], { [name]: value }))
    expect(e.option).toBe(option)
    expect(e.message.startsWith(`${name}: ${option}`)).toBe(true)
  })

  it("reports usage errors as OptionsError without exiting", async () => {
    const unknown = await rejection(parse(["--prot", "1"]))
    expect(unknown.option).toBe("--prot")
    expect(unknown.message).toContain("unknown option '--prot'")
    const missing = await rejection(parse(["--port"]))
    expect(missing.option).toBe("--port")
    const excess = await rejection(parse(["extra"]))
    expect(excess.message).toContain("too many arguments")
    const command = await rejection(parseCommandLine(["run", "web"], {}, quiet))
    expect(command.message).toContain("unknown command 'web'")
  })

  it("prints help and the version through CommandLineExit", async () => {
    let out = ""
    const io = { writeOut: (t: string) => (out += t), writeErr: () => undefined }
    const help = await parseCommandLine(["run", "api", "--help"], {}, io).catch((e: unknown) => e)
    expect(help).toBeInstanceOf(CommandLineExit)
    expect((help as CommandLineExit).exitCode).toBe(0)
    for (const text of ["--port", "--standalone-config", "MCPSTORE_PORT", "Precedence", "health_check_seconds"]) {
      expect(out).toContain(text)
    }
    out = ""
    const version = await parseCommandLine(["--version"], {}, io).catch((e: unknown) => e)
    expect((version as CommandLineExit).exitCode).toBe(0)
    expect(out).toMatch(/^\d+\.\d+\.\d+/)

    let err = ""
    const none = await parseCommandLine([], {}, { writeOut: () => undefined, writeErr: (t) => (err += t) }).catch(
      (e: unknown) => e
    )
    expect(none).toBeInstanceOf(CommandLineExit)
    expect((none as CommandLineExit).exitCode).toBe(1)
    expect(err).toContain("Usage: mcp-store")
  })
})

/** Runs a subcommand in-process with its output captured; resolves with its exit code and output. */
const runCaptured = async (
  run: (argv: ReadonlyArray<string>, env: NodeJS.ProcessEnv, io: { cwd: string; writeOut: (t: string) => void; writeErr: (t: string) => void }) => Promise<number>,
  argv: ReadonlyArray<string>,
  cwd: string
) => {
  let out = ""
  let err = ""
  const code = await run(argv, {}, { cwd, writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out, err }
}

describe("the subcommands' usage errors", () => {
  it("an empty --config or --keys-file is a usage error, and nothing is written beside the directory", async () => {
    const work = join(dir, "work")
    mkdirSync(work)
    for (const argv of [
      ["create", "--role", "admin", "--config="],
      ["create", "--role", "admin", "--keys-file="],
      ["create", "--role", "admin", "--config", " "],
      ["list", "--config="]
    ]) {
      const { code, out, err } = await runCaptured(runKeys, argv, work)
      expect(code, argv.join(" ")).toBe(2)
      expect(err).toMatch(/mcp-store keys: --(config|keys-file) must be the path of a file/)
      expect(out).toBe("")
    }
    for (const argv of [
      ["approve-client", "https://client.example/oauth.json", "--agent", "a1", "--machine", "--config="],
      ["list-clients", "--config="],
      ["revoke-client", "https://client.example/oauth.json", "--config="]
    ]) {
      const { code, out, err } = await runCaptured(runOAuthClients, argv, work)
      expect(code, argv.join(" ")).toBe(2)
      expect(err).toMatch(/mcp-store auth: --config must be the path of a file/)
      expect(out).toBe("")
    }
    expect(readdirSync(dir)).toEqual(["work"])
    expect(readdirSync(work)).toEqual([])
  })

  it("a keys file that is not JSON is named with the position of the error, never the text around it", async () => {
    const file = join(dir, "broken.keys.json")
    await writeFile(file, '{"version": 1, "keys": [{"name": "ops", "hash": s3cr3tHASH}]}\n')
    const { code, err } = await runCaptured(runKeys, ["list", "--keys-file", file], dir)
    expect(code).toBe(1)
    expect(err).toMatch(/not valid JSON \(.*line 1, column \d+\)/)
    expect(err).not.toContain("s3cr3t")
  })

  it("help shown for want of a subcommand exits 2; help asked for exits 0", async () => {
    const none = await runCaptured(runKeys, [], dir)
    expect(none.code).toBe(2)
    expect(none.err).toMatch(/Usage: mcp-store keys/)
    expect(none.err).not.toMatch(/outputHelp/)
    expect((await runCaptured(runKeys, ["--help"], dir)).code).toBe(0)
    expect((await runCaptured(runKeys, ["create", "--help"], dir)).code).toBe(0)
    expect((await runCaptured(runKeys, ["help"], dir)).code).toBe(0)
    expect((await runCaptured(runOAuthClients, [], dir)).code).toBe(2)
    expect((await runCaptured(runKeys, ["nope"], dir)).code).toBe(2)
  })

  it("`mcp-store keys` without a subcommand exits 2 as a process too", async () => {
    const script = await storeScript()
    const run = (...argv: string[]) =>
      new Promise<{ code: number | null; stderr: string }>((resolve) => {
        const child = execFile(process.execPath, [script, ...argv], { cwd: dir, env: { ...process.env, MCPSTORE_CONFIG: "" } }, (_e, _out, stderr) => resolve({ code: child.exitCode, stderr }))
      })
    const none = await run("keys")
    expect(none.code).toBe(2)
    expect(none.stderr).toMatch(/Usage: mcp-store keys/)
    expect((await run("keys", "--help")).code).toBe(0)
    expect(existsSync(join(dir, "mcp-store.keys.json"))).toBe(false)
  }, 120_000)

  it("auth --timeout must be a number of seconds above 0 and at most 600", async () => {
    for (const timeout of ["abc", "0", "-5", "601", "", "0x10", "1e3", "Infinity"]) {
      const { code, err } = await runCaptured(runAuth, ["svc", "--url", "http://127.0.0.1:9", "--timeout", timeout], dir)
      expect(code, timeout).toBe(2)
      expect(err).toBe("mcp-store auth: --timeout must be a number of seconds above 0 and at most 600\n")
    }
    // A good one goes on to the store (here none: exit 1).
    const good = await runCaptured(runAuth, ["svc", "--url", "http://127.0.0.1:9", "--timeout", "30"], dir)
    expect(good.code).toBe(1)
    expect(good.err).toMatch(/cannot be reached/)
  })
})
