/**
 * A realistic example of every request and answer of the contract, for the OpenAPI document (each
 * operation's request body and 200 answer, by operationId; src/http/Api.ts puts them in): real
 * answers of a store serving the demo server (examples/demo-server.ts: echo, add, get_time), with
 * the machine's paths and ports replaced by ordinary ones and long lists cut to two entries.
 * test/http/openapi.test.ts checks that every operation has one and that each decodes with its
 * endpoint's own schemas, so an example cannot drift from the contract unnoticed.
 */
export interface Example {
  readonly request?: unknown
  readonly response: unknown
}

/** The demo service's command line (mcp.example.json), as every example that shows it has it. */
const DEMO_ARGS = ["--input-type=module", "--eval", "import 'mcp-store/demo-server'"]

/** The demo service's first two tools, as list_tools and get_service_info show them in either scope. */
const DEMO_TOOLS = [
  {
    "name": "demo__echo",
    "original_name": "echo",
    "description": "Returns the message unchanged.",
    "service_name": "demo",
    "inputSchema": {
      "type": "object",
      "properties": {
        "message": {
          "type": "string"
        }
      },
      "required": [
        "message"
      ],
      "$schema": "http://json-schema.org/draft-07/schema#"
    }
  },
  {
    "name": "demo__add",
    "original_name": "add",
    "description": "Adds two numbers.",
    "service_name": "demo",
    "inputSchema": {
      "type": "object",
      "properties": {
        "a": {
          "type": "number"
        },
        "b": {
          "type": "number"
        }
      },
      "required": [
        "a",
        "b"
      ],
      "$schema": "http://json-schema.org/draft-07/schema#"
    }
  }
]

/** Resources, templates and prompts of server-everything registered as "everything", as the catalog routes show them. */
const CATALOG_EXAMPLES = {
  listResources: {
    "response": {
      "success": true,
      "message": "1 resource(s)",
      "resources": [
        {
          "uri": "demo://resource/static/document/architecture.md",
          "name": "architecture.md",
          "service_name": "everything",
          "original_uri": "demo://resource/static/document/architecture.md",
          "mimeType": "text/markdown",
          "description": "Static document file exposed from /docs: architecture.md"
        }
      ]
    }
  },
  listResourceTemplates: {
    "response": {
      "success": true,
      "message": "1 resource template(s)",
      "resource_templates": [
        {
          "uriTemplate": "demo://resource/dynamic/text/{resourceId}",
          "name": "Dynamic Text Resource",
          "service_name": "everything",
          "original_uri_template": "demo://resource/dynamic/text/{resourceId}",
          "mimeType": "text/plain",
          "description": "Plaintext dynamic resource fabricated from the {resourceId} variable, which must be an integer."
        }
      ]
    }
  },
  readResource: {
    "request": { "uri": "demo://resource/dynamic/text/7" },
    "response": {
      "success": true,
      "message": "Resource 'demo://resource/dynamic/text/7' read",
      "uri": "demo://resource/dynamic/text/7",
      "service_name": "everything",
      "contents": [{ "uri": "demo://resource/dynamic/text/7", "mimeType": "text/plain", "text": "Resource 7: This is a plaintext resource created at 10:41:07 AM" }]
    }
  },
  listPrompts: {
    "response": {
      "success": true,
      "message": "1 prompt(s)",
      "prompts": [
        {
          "name": "everything__args-prompt",
          "original_name": "args-prompt",
          "service_name": "everything",
          "title": "Arguments Prompt",
          "description": "A prompt with two arguments, one required and one optional",
          "arguments": [
            { "name": "city", "description": "Name of the city", "required": true },
            { "name": "state", "description": "Name of the state", "required": false }
          ]
        }
      ]
    }
  },
  getPrompt: {
    "request": { "name": "everything__args-prompt", "arguments": { "city": "Lyon" } },
    "response": {
      "success": true,
      "message": "Prompt 'everything__args-prompt' got",
      "name": "everything__args-prompt",
      "service_name": "everything",
      "messages": [{ "role": "user", "content": { "type": "text", "text": "What's weather in Lyon?" } }]
    }
  }
}

/** An agent's two newest tool calls, as tool_records and tool_call_history show them. */
const AGENT_CALLS = [
  {
    "id": "67aad011-07d0-4718-a22c-27858e5a3c14",
    "timestamp": "2026-11-23T07:26:46.241Z",
    "scope": "agent",
    "agent_id": "agent-1",
    "service_name": "demo",
    "tool_name": "add",
    "params": {
      "a": 2,
      "b": 3
    },
    "result": {
      "sum": 5
    },
    "outcome": "success",
    "error": null,
    "duration_ms": 5.07,
    "trace_id": "mwsy015o-6-5dkk4y"
  },
  {
    "id": "dddfe937-d184-44fc-944d-44af89ed7967",
    "timestamp": "2026-11-23T07:26:46.199Z",
    "scope": "agent",
    "agent_id": "agent-1",
    "service_name": "demo",
    "tool_name": "add",
    "params": {
      "a": 2,
      "b": 3
    },
    "result": {
      "sum": 5
    },
    "outcome": "success",
    "error": null,
    "duration_ms": 3.55,
    "trace_id": "mwsy014j-5-og87um"
  }
]

export const EXAMPLES: Readonly<Record<string, Example>> = {
  ...Object.fromEntries(
    Object.entries(CATALOG_EXAMPLES).flatMap(([name, example]) => [
      [`store.${name}`, example],
      [`agent.${name}`, example]
    ])
  ),
  "store.addService": {
    "request": {
      "name": "demo2",
      "command": "node",
      "args": DEMO_ARGS
    },
    "response": {
      "success": true,
      "message": "Services added demo2",
      "services": [
        {
          "name": "demo2",
          "url": "",
          "status": "healthy",
          "tool_count": 3,
          "transport_type": "stdio",
          "command": "node",
          "args": DEMO_ARGS,
          "scope": "store",
          "client_id": "client_store_demo2_ad51e8ca",
          "last_error": null,
          "hint": null,
          "last_state_change": "2026-11-23T07:26:32.084Z",
          "consecutive_failures": 0,
          "reconnect_attempts": 0,
          "next_retry_at": null,
          "response_time_ms": null
        }
      ],
      "added": [
        "demo2"
      ],
      "updated": [],
      "unchanged": [],
      "connected": [
        "demo2"
      ],
      "failed": [],
      "pending": []
    }
  },
  "store.listServices": {
    "response": {
      "success": true,
      "message": "2 service(s)",
      "services": [
        {
          "name": "demo",
          "url": "",
          "status": "healthy",
          "tool_count": 3,
          "transport_type": "stdio",
          "command": "node",
          "args": DEMO_ARGS,
          "scope": "store",
          "client_id": "client_store_demo_ad51e8ca",
          "last_error": null,
          "hint": null,
          "last_state_change": "2026-11-23T07:26:28.150Z",
          "consecutive_failures": 0,
          "reconnect_attempts": 0,
          "next_retry_at": null,
          "response_time_ms": 7.24
        },
        {
          "name": "demo2",
          "url": "",
          "status": "healthy",
          "tool_count": 3,
          "transport_type": "stdio",
          "command": "node",
          "args": DEMO_ARGS,
          "scope": "store",
          "client_id": "client_store_demo2_ad51e8ca",
          "last_error": null,
          "hint": null,
          "last_state_change": "2026-11-23T07:26:32.084Z",
          "consecutive_failures": 0,
          "reconnect_attempts": 0,
          "next_retry_at": null,
          "response_time_ms": null
        }
      ],
      "total_services": 2,
      "total_tools": 6
    }
  },
  "store.getServiceInfo": {
    "response": {
      "success": true,
      "message": "Service 'demo' is healthy",
      "service": {
        "name": "demo",
        "url": "",
        "status": "healthy",
        "tool_count": 3,
        "transport_type": "stdio",
        "command": "node",
        "args": DEMO_ARGS,
        "scope": "store",
        "client_id": "client_store_demo_ad51e8ca",
        "last_error": null,
        "hint": null,
        "last_state_change": "2026-11-23T07:26:28.150Z",
        "consecutive_failures": 0,
        "reconnect_attempts": 0,
        "next_retry_at": null,
        "response_time_ms": 7.24,
        "config": {
          "command": "node",
          "args": DEMO_ARGS
        }
      },
      "tools": DEMO_TOOLS,
      "hidden_tools": [],
      "connected": true
    }
  },
  "store.listTools": {
    "response": {
      "success": true,
      "message": "6 tool(s)",
      "tools": DEMO_TOOLS,
      "total_tools": 6,
      "services_count": 2,
      "tools_by_service": {
        "demo": 3,
        "demo2": 3
      }
    }
  },
  "store.callTool": {
    "request": {
      "tool_name": "demo__add",
      "args": {
        "a": 2,
        "b": 3
      }
    },
    "response": {
      "success": true,
      "message": "Tool 'demo__add' called",
      "result": {
        "sum": 5
      },
      "content": [
        {
          "type": "text",
          "text": "5"
        }
      ],
      "structured_content": {
        "sum": 5
      },
      "is_error": false,
      "tool_name": "demo__add",
      "original_name": "add",
      "service_name": "demo",
      "duration_ms": 8.14,
      "trace_id": "mwsxzqa4-3-sl3zwz"
    }
  },
  "store.useTool": {
    "request": {
      "tool_name": "demo__add",
      "args": {
        "a": 2,
        "b": 3
      }
    },
    "response": {
      "success": true,
      "message": "Tool 'demo__add' called",
      "result": {
        "sum": 5
      },
      "content": [
        {
          "type": "text",
          "text": "5"
        }
      ],
      "structured_content": {
        "sum": 5
      },
      "is_error": false,
      "tool_name": "demo__add",
      "original_name": "add",
      "service_name": "demo",
      "duration_ms": 6.87,
      "trace_id": "mwsxzqay-4-1mi488"
    }
  },
  "store.checkServices": {
    "response": {
      "success": true,
      "message": "2 of 2 service(s) healthy",
      "services": [
        {
          "name": "demo",
          "status": "healthy",
          "healthy": true,
          "response_time_ms": 5.17,
          "error": null,
          "checked_at": "2026-11-23T07:26:32.188Z"
        },
        {
          "name": "demo2",
          "status": "healthy",
          "healthy": true,
          "response_time_ms": 5.86,
          "error": null,
          "checked_at": "2026-11-23T07:26:32.189Z"
        }
      ],
      "healthy_count": 2,
      "total": 2
    }
  },
  "store.health": {
    "response": {
      "success": true,
      "message": "2 service(s), healthy",
      "status": "healthy",
      "services": {
        "initializing": 0,
        "healthy": 2,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "total_services": 2,
      "uptime_seconds": 6.61,
      "version": "0.1.0"
    }
  },
  "store.getStats": {
    "response": {
      "success": true,
      "message": "Store statistics",
      "total_services": 2,
      "total_tools": 6,
      "healthy_services": 2,
      "services_by_status": {
        "initializing": 0,
        "healthy": 2,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "tools_by_service": {
        "demo": 3,
        "demo2": 3
      },
      "total_agents": 1,
      "tool_calls": {
        "total": 4,
        "succeeded": 4,
        "failed": 0,
        "avg_duration_ms": 8.81
      },
      "context_type": "store"
    }
  },
  "store.showMcpConfig": {
    "response": {
      "success": true,
      "message": "Services configuration",
      "config": {
        "mcpServers": {
          "demo": {
            "command": "node",
            "args": DEMO_ARGS
          },
          "demo2": {
            "command": "node",
            "args": DEMO_ARGS
          }
        },
        "agents": {
          "agent-1": {
            "mcpServers": {
              "demo": {
                "command": "node",
                "args": DEMO_ARGS
              }
            }
          }
        }
      },
      "path": "/home/me/mcp-store/mcp.json"
    }
  },
  "store.authorizeService": {
    "request": {
      "service_name": "github"
    },
    "response": {
      "success": true,
      "message": "Open the authorization URL to authorize 'github'",
      "service_name": "github",
      "state": "authorizing",
      "authorization_url": "https://auth.example.com/authorize?response_type=code&client_id=mcp-store-1&code_challenge=E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM&code_challenge_method=S256&redirect_uri=http%3A%2F%2F127.0.0.1%3A8000%2Foauth%2Fcallback&state=q5Qm3Hn0yWc9m1vEo4m2&resource=https%3A%2F%2Fmcp.example.com%2Fmcp"
    }
  },
  "store.waitService": {
    "request": {
      "client_id_or_service_name": "demo",
      "status": "healthy",
      "timeout": 10
    },
    "response": {
      "success": true,
      "message": "Service wait completed: success",
      "data": {
        "client_id_or_service_name": "demo",
        "target_status": "healthy",
        "timeout": 10,
        "result": true,
        "final_status": "healthy",
        "elapsed_ms": 0.04,
        "context": "store"
      }
    }
  },
  "store.deleteServiceTwoStep": {
    "request": {
      "service_name": "demo2"
    },
    "response": {
      "success": true,
      "message": "Service 'demo2' deleted",
      "service_name": "demo2",
      "step1_config_removal": true,
      "step2_registry_cleanup": true,
      "step1_error": null,
      "step2_error": null,
      "overall_success": true
    }
  },
  "store.toolRecords": {
    "response": {
      "success": true,
      "message": "4 of 4 record(s)",
      "executions": [
        {
          "id": "342b9962-1d4b-485e-9ab4-c3ab9e58d8b9",
          "timestamp": "2026-11-23T07:26:32.177Z",
          "scope": "store",
          "agent_id": null,
          "service_name": "demo",
          "tool_name": "add",
          "params": {
            "a": 2,
            "b": 3
          },
          "result": {
            "sum": 5
          },
          "outcome": "success",
          "error": null,
          "duration_ms": 6.9,
          "trace_id": "mwsxzqay-4-1mi488"
        },
        {
          "id": "2cb91977-bb70-4f74-80a2-b2d168dfbb7e",
          "timestamp": "2026-11-23T07:26:32.148Z",
          "scope": "store",
          "agent_id": null,
          "service_name": "demo",
          "tool_name": "add",
          "params": {
            "a": 2,
            "b": 3
          },
          "result": {
            "sum": 5
          },
          "outcome": "success",
          "error": null,
          "duration_ms": 8.17,
          "trace_id": "mwsxzqa4-3-sl3zwz"
        }
      ],
      "total": 4,
      "summary": {
        "total_executions": 4,
        "by_tool": {
          "demo__add": {
            "count": 3,
            "errors": 0,
            "avg_duration_ms": 9.38
          },
          "demo__echo": {
            "count": 1,
            "errors": 0,
            "avg_duration_ms": 7.08
          }
        },
        "by_service": {
          "demo": {
            "count": 4,
            "errors": 0,
            "avg_duration_ms": 8.81
          }
        }
      }
    }
  },
  "store.networkCheck": {
    "request": {
      "endpoints": [
        "http://127.0.0.1:18200/health"
      ]
    },
    "response": {
      "success": true,
      "message": "1 of 1 endpoint(s) reachable",
      "results": [
        {
          "endpoint_name": "http://127.0.0.1:18200/health",
          "url": "http://127.0.0.1:18200/health",
          "reachable": true,
          "status": "healthy",
          "http_status": 200,
          "response_time_ms": 10.76,
          "error": null,
          "checked_at": "2026-11-23T07:26:32.410Z"
        }
      ]
    }
  },
  "store.systemResources": {
    "response": {
      "success": true,
      "message": "System resources",
      "server_uptime_seconds": 6.93,
      "memory_total": 25276063744,
      "memory_used": 4237062144,
      "memory_percentage": 16.76,
      "process_rss": 297762816,
      "heap_used": 119293456,
      "cpu_percentage": 1.34,
      "cpu_count": 2,
      "load_average": [
        15.7,
        14.62,
        11.86
      ],
      "disk_total": 270553174016,
      "disk_used": 26740314112,
      "disk_usage_percentage": 9.88
    }
  },
  "store.serviceStatus": {
    "response": {
      "success": true,
      "message": "Service 'demo' is healthy",
      "name": "demo",
      "status": "healthy",
      "consecutive_failures": 0,
      "consecutive_successes": 2,
      "reconnect_attempts": 0,
      "next_retry_at": null,
      "last_error": null,
      "hint": null,
      "last_health_check_at": "2026-11-23T07:26:32.194Z",
      "response_time_ms": 5.17,
      "state_entered_at": "2026-11-23T07:26:28.150Z",
      "transitions": [
        {
          "from": null,
          "to": "initializing",
          "at": "2026-11-23T07:26:25.988Z",
          "reason": "added"
        },
        {
          "from": "initializing",
          "to": "healthy",
          "at": "2026-11-23T07:26:28.150Z",
          "reason": "connected"
        }
      ],
      "stderr_tail": []
    }
  },
  "store.restartService": {
    "request": {
      "service_name": "demo"
    },
    "response": {
      "success": true,
      "message": "Service 'demo' restarting",
      "service_name": "demo",
      "status": "initializing"
    }
  },
  "store.updateService": {
    "request": {
      "command": "node",
      "args": DEMO_ARGS
    },
    "response": {
      "success": true,
      "message": "Service 'demo' unchanged",
      "service": {
        "name": "demo",
        "url": "",
        "status": "initializing",
        "tool_count": 3,
        "transport_type": "stdio",
        "command": "node",
        "args": DEMO_ARGS,
        "scope": "store",
        "client_id": "client_store_demo_ad51e8ca",
        "last_error": null,
        "hint": null,
        "last_state_change": "2026-11-23T07:26:32.596Z",
        "consecutive_failures": 0,
        "reconnect_attempts": 0,
        "next_retry_at": null,
        "response_time_ms": 5.17
      },
      "changed": false
    }
  },
  "store.disconnectService": {
    "request": {
      "service_name": "demo"
    },
    "response": {
      "success": true,
      "message": "Service 'demo' is disconnected",
      "service_name": "demo",
      "status": "disconnected"
    }
  },
  "store.listAllAgents": {
    "response": {
      "success": true,
      "message": "1 agent(s)",
      "agents": [
        {
          "agent_id": "agent-1",
          "service_count": 1,
          "tool_count": 3,
          "status_summary": {
            "healthy": 1
          },
          "services": [
            "demo"
          ]
        }
      ],
      "total_agents": 1
    }
  },
  "store.showConfig": {
    "response": {
      "success": true,
      "message": "Effective settings",
      "config": {
        "mcp_config_file": "/home/me/mcp-store/mcp.json",
        "debug": false,
        "tool_record_max_file_size": 30,
        "tool_record_retention_days": 7,
        "monitoring": {
          "health_check_seconds": 30,
          "tools_update_hours": 2,
          "reconnection_seconds": 60,
          "cleanup_hours": 24,
          "enable_tools_update": true,
          "enable_reconnection": true,
          "update_tools_on_reconnection": true,
          "warning_check_seconds": 10,
          "ping_timeout_seconds": 5,
          "slow_response_ms": 3000,
          "initialization_timeout_seconds": 60,
          "reconnecting_failure_threshold": 2,
          "max_reconnect_attempts": 10,
          "unreachable_retry_seconds": 300,
          "disconnection_timeout_seconds": 10
        },
        "server": {
          "host": "127.0.0.1",
          "port": 43783,
          "reload": false,
          "log_level": "error",
          "auto_open_browser": false,
          "show_startup_info": false,
          "api_key_set": false,
          "local_services": true,
          "allowed_hosts": [],
          "allowed_origins": [],
          "allow_remote_local_services": false,
          "max_event_streams": 100,
          "max_mcp_sessions": 1000,
          "mcp_session_idle_seconds": 1800,
          "max_body_bytes": 1048576,
          "max_connections": 1000
        },
        "limits": {
          "max_message_bytes": 16777216,
          "max_services": 10000,
          "max_services_per_request": 100,
          "max_waiters": 10000
        },
        "version": "0.1.0"
      }
    }
  },
  "store.refreshTools": {
    "request": {
      "service_name": "demo"
    },
    "response": {
      "success": true,
      "message": "1 service(s) refreshed, 0 changed",
      "results": [
        {
          "service_name": "demo",
          "tool_count": 3,
          "changed": false,
          "status": "healthy",
          "error": null
        }
      ]
    }
  },
  "agent.addService": {
    "request": {
      "name": "demo",
      "command": "node",
      "args": DEMO_ARGS
    },
    "response": {
      "success": true,
      "message": "Services unchanged demo",
      "services": [
        {
          "name": "demo",
          "url": "",
          "status": "healthy",
          "tool_count": 3,
          "transport_type": "stdio",
          "command": "node",
          "args": DEMO_ARGS,
          "scope": "agent-1",
          "client_id": "client_agent-1_demo_ad51e8ca",
          "last_error": null,
          "hint": null,
          "last_state_change": "2026-11-23T07:26:30.127Z",
          "consecutive_failures": 0,
          "reconnect_attempts": 0,
          "next_retry_at": null,
          "response_time_ms": 6.23
        }
      ],
      "added": [],
      "updated": [],
      "unchanged": [
        "demo"
      ],
      "connected": [
        "demo"
      ],
      "failed": [],
      "pending": []
    }
  },
  "agent.listServices": {
    "response": {
      "success": true,
      "message": "1 service(s)",
      "services": [
        {
          "name": "demo",
          "url": "",
          "status": "healthy",
          "tool_count": 3,
          "transport_type": "stdio",
          "command": "node",
          "args": DEMO_ARGS,
          "scope": "agent-1",
          "client_id": "client_agent-1_demo_ad51e8ca",
          "last_error": null,
          "hint": null,
          "last_state_change": "2026-11-23T07:26:30.127Z",
          "consecutive_failures": 0,
          "reconnect_attempts": 0,
          "next_retry_at": null,
          "response_time_ms": 6.23
        }
      ],
      "total_services": 1,
      "total_tools": 3
    }
  },
  "agent.getServiceInfo": {
    "response": {
      "success": true,
      "message": "Service 'demo' is healthy",
      "service": {
        "name": "demo",
        "url": "",
        "status": "healthy",
        "tool_count": 3,
        "transport_type": "stdio",
        "command": "node",
        "args": DEMO_ARGS,
        "scope": "agent-1",
        "client_id": "client_agent-1_demo_ad51e8ca",
        "last_error": null,
        "hint": null,
        "last_state_change": "2026-11-23T07:26:30.127Z",
        "consecutive_failures": 0,
        "reconnect_attempts": 0,
        "next_retry_at": null,
        "response_time_ms": 6.23,
        "config": {
          "command": "node",
          "args": DEMO_ARGS
        }
      },
      "tools": DEMO_TOOLS,
      "hidden_tools": [],
      "connected": true
    }
  },
  "agent.listTools": {
    "response": {
      "success": true,
      "message": "3 tool(s)",
      "tools": DEMO_TOOLS,
      "total_tools": 3,
      "services_count": 1,
      "tools_by_service": {
        "demo": 3
      }
    }
  },
  "agent.callTool": {
    "request": {
      "tool_name": "demo__add",
      "args": {
        "a": 2,
        "b": 3
      }
    },
    "response": {
      "success": true,
      "message": "Tool 'demo__add' called",
      "result": {
        "sum": 5
      },
      "content": [
        {
          "type": "text",
          "text": "5"
        }
      ],
      "structured_content": {
        "sum": 5
      },
      "is_error": false,
      "tool_name": "demo__add",
      "original_name": "add",
      "service_name": "demo",
      "duration_ms": 3.52,
      "trace_id": "mwsy014j-5-og87um"
    }
  },
  "agent.useTool": {
    "request": {
      "tool_name": "demo__add",
      "args": {
        "a": 2,
        "b": 3
      }
    },
    "response": {
      "success": true,
      "message": "Tool 'demo__add' called",
      "result": {
        "sum": 5
      },
      "content": [
        {
          "type": "text",
          "text": "5"
        }
      ],
      "structured_content": {
        "sum": 5
      },
      "is_error": false,
      "tool_name": "demo__add",
      "original_name": "add",
      "service_name": "demo",
      "duration_ms": 5.04,
      "trace_id": "mwsy015o-6-5dkk4y"
    }
  },
  "agent.authorizeService": {
    "request": {
      "service_name": "github",
      "code": "b7f3e0c2-5d1a-4c8e-9f6b-2a4d8e1c7b90",
      "state": "q5Qm3Hn0yWc9m1vEo4m2"
    },
    "response": {
      "success": true,
      "message": "Service 'github' authorized",
      "service_name": "github",
      "state": "authorized"
    }
  },
  "agent.waitService": {
    "request": {
      "client_id_or_service_name": "demo",
      "status": "healthy",
      "timeout": 10
    },
    "response": {
      "success": true,
      "message": "Service wait completed: success",
      "data": {
        "client_id_or_service_name": "demo",
        "target_status": "healthy",
        "timeout": 10,
        "result": true,
        "final_status": "healthy",
        "elapsed_ms": 0.01,
        "context": "agent",
        "agent_id": "agent-1"
      }
    }
  },
  "agent.checkServices": {
    "response": {
      "success": true,
      "message": "1 of 1 service(s) healthy",
      "services": [
        {
          "name": "demo",
          "status": "healthy",
          "healthy": true,
          "response_time_ms": 1.16,
          "error": null,
          "checked_at": "2026-11-23T07:26:46.247Z"
        }
      ],
      "healthy_count": 1,
      "total": 1
    }
  },
  "agent.showMcpConfig": {
    "response": {
      "success": true,
      "message": "Services configuration",
      "config": {
        "mcpServers": {
          "demo": {
            "command": "node",
            "args": DEMO_ARGS
          }
        }
      },
      "path": "/home/me/mcp-store/mcp.json"
    }
  },
  "agent.health": {
    "response": {
      "success": true,
      "message": "1 service(s), healthy",
      "status": "healthy",
      "services": {
        "initializing": 0,
        "healthy": 1,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "total_services": 1,
      "uptime_seconds": 20.66,
      "version": "0.1.0",
      "agent_id": "agent-1"
    }
  },
  "agent.getStats": {
    "response": {
      "success": true,
      "message": "Statistics of agent 'agent-1'",
      "total_services": 1,
      "total_tools": 3,
      "healthy_services": 1,
      "services_by_status": {
        "initializing": 0,
        "healthy": 1,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "tools_by_service": {
        "demo": 3
      },
      "tool_calls": {
        "total": 3,
        "succeeded": 3,
        "failed": 0,
        "avg_duration_ms": 26.59
      },
      "context_type": "agent",
      "agent_id": "agent-1"
    }
  },
  "agent.toolRecords": {
    "response": {
      "success": true,
      "message": "3 of 3 record(s)",
      "executions": AGENT_CALLS,
      "total": 3,
      "summary": {
        "total_executions": 3,
        "by_tool": {
          "demo__get_time": {
            "count": 1,
            "errors": 0,
            "avg_duration_ms": 71.15
          },
          "demo__add": {
            "count": 2,
            "errors": 0,
            "avg_duration_ms": 4.31
          }
        },
        "by_service": {
          "demo": {
            "count": 3,
            "errors": 0,
            "avg_duration_ms": 26.59
          }
        }
      }
    }
  },
  "monitoring.agentsSummary": {
    "response": {
      "success": true,
      "message": "Agents summary",
      "total_agents": 1,
      "active_agents": 1,
      "total_services": 2,
      "total_tools": 6,
      "store_services": 1,
      "store_tools": 3,
      "agents": [
        {
          "agent_id": "agent-1",
          "service_count": 1,
          "tool_count": 3,
          "healthy_services": 1,
          "unhealthy_services": 0,
          "total_tool_executions": 3,
          "last_activity": "2026-11-23T07:26:46.241Z"
        }
      ]
    }
  },
  "monitoring.config": {
    "response": {
      "success": true,
      "message": "Monitoring settings",
      "config": {
        "health_check_seconds": 30,
        "tools_update_hours": 2,
        "reconnection_seconds": 60,
        "cleanup_hours": 24,
        "enable_tools_update": true,
        "enable_reconnection": true,
        "update_tools_on_reconnection": true,
        "warning_check_seconds": 10,
        "ping_timeout_seconds": 5,
        "slow_response_ms": 3000,
        "initialization_timeout_seconds": 60,
        "reconnecting_failure_threshold": 2,
        "max_reconnect_attempts": 10,
        "unreachable_retry_seconds": 300,
        "disconnection_timeout_seconds": 10
      }
    }
  },
  "monitoring.servicesStatusDistribution": {
    "response": {
      "success": true,
      "message": "Status distribution",
      "total_services": 2,
      "distribution": {
        "initializing": 0,
        "healthy": 2,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "by_scope": {
        "store": {
          "initializing": 0,
          "healthy": 1,
          "warning": 0,
          "reconnecting": 0,
          "unreachable": 0,
          "disconnecting": 0,
          "disconnected": 0
        },
        "agent-1": {
          "initializing": 0,
          "healthy": 1,
          "warning": 0,
          "reconnecting": 0,
          "unreachable": 0,
          "disconnecting": 0,
          "disconnected": 0
        }
      }
    }
  },
  "monitoring.toolsUsageStats": {
    "response": {
      "success": true,
      "message": "Tool usage",
      "tools": [
        {
          "tool_name": "add",
          "service_name": "demo",
          "scope": "store",
          "call_count": 3,
          "success_count": 3,
          "error_count": 0,
          "success_rate": 1,
          "avg_duration_ms": 9.38,
          "p95_duration_ms": 13.08,
          "last_called_at": "2026-11-23T07:26:32.177Z"
        },
        {
          "tool_name": "add",
          "service_name": "demo",
          "scope": "agent-1",
          "call_count": 2,
          "success_count": 2,
          "error_count": 0,
          "success_rate": 1,
          "avg_duration_ms": 4.31,
          "p95_duration_ms": 5.07,
          "last_called_at": "2026-11-23T07:26:46.241Z"
        }
      ],
      "total_tools": 4
    }
  },
  "monitoring.systemPerformance": {
    "response": {
      "success": true,
      "message": "System performance",
      "requests_total": 46,
      "requests_per_second": 0.77,
      "latency_ms": {
        "p50": 9.72,
        "p95": 2239.1,
        "p99": 10942.72
      },
      "event_loop_lag_ms": 169.87,
      "cpu_percentage": 0.33,
      "memory_rss": 296206336,
      "heap_used": 111640568,
      "uptime_seconds": 20.9
    }
  },
  "monitoring.servicesResponseTime": {
    "response": {
      "success": true,
      "message": "Response times",
      "services": [
        {
          "service_name": "demo",
          "scope": "store",
          "last_ms": 5.17,
          "avg_ms": 7.94,
          "p50_ms": 7.08,
          "p95_ms": 13.08,
          "samples": 6
        },
        {
          "service_name": "demo",
          "scope": "agent-1",
          "last_ms": 1.16,
          "avg_ms": 17.43,
          "p50_ms": 5.07,
          "p95_ms": 71.15,
          "samples": 5
        }
      ]
    }
  },
  "monitoring.errorRateStats": {
    "response": {
      "success": true,
      "message": "Error rates",
      "minutes": 60,
      "total_calls": 7,
      "failed_calls": 0,
      "error_rate": 0,
      "by_outcome": {
        "success": 7,
        "tool_error": 0,
        "invalid_arguments": 0,
        "protocol_error": 0,
        "transport_error": 0,
        "message_too_large": 0,
        "timeout": 0,
        "unavailable": 0,
        "cancelled": 0
      },
      "by_service": {
        "demo": {
          "calls": 7,
          "errors": 0,
          "error_rate": 0
        }
      }
    }
  },
  "monitoring.historicalStats": {
    "response": {
      "success": true,
      "message": "Calls per day",
      "days": [
        {
          "date": "2026-11-17",
          "calls": 0,
          "errors": 0,
          "avg_duration_ms": 0
        },
        {
          "date": "2026-11-18",
          "calls": 0,
          "errors": 0,
          "avg_duration_ms": 0
        }
      ]
    }
  },
  "monitoring.serviceHealthHistory": {
    "response": {
      "success": true,
      "message": "Health history",
      "service_name": "demo",
      "scope": "store",
      "hours": 24,
      "transitions": [
        {
          "from": null,
          "to": "initializing",
          "at": "2026-11-23T07:26:25.988Z",
          "reason": "added"
        },
        {
          "from": "initializing",
          "to": "healthy",
          "at": "2026-11-23T07:26:28.150Z",
          "reason": "connected"
        }
      ],
      "checks": [
        {
          "at": "2026-11-23T07:26:29.677Z",
          "ok": true,
          "response_time_ms": 7.24,
          "error": null
        },
        {
          "at": "2026-11-23T07:26:32.194Z",
          "ok": true,
          "response_time_ms": 5.17,
          "error": null
        }
      ]
    }
  },
  "monitoring.toolCallHistory": {
    "response": {
      "success": true,
      "message": "Recent tool calls",
      "calls": AGENT_CALLS
    }
  },
  "monitoring.realtimeStatus": {
    "response": {
      "success": true,
      "message": "Real-time status",
      "timestamp": "2026-11-23T07:26:46.592Z",
      "services": {
        "initializing": 0,
        "healthy": 2,
        "warning": 0,
        "reconnecting": 0,
        "unreachable": 0,
        "disconnecting": 0,
        "disconnected": 0
      },
      "in_flight_calls": 0,
      "calls_last_minute": 7,
      "errors_last_minute": 0,
      "active_connections": 2
    }
  },
  "monitoring.activeConnections": {
    "response": {
      "success": true,
      "message": "Active connections",
      "http_connections": 2,
      "upstream_sessions": 2,
      "stdio_processes": 2,
      "event_subscribers": 0
    }
  },
  "monitoring.resourceUsage": {
    "response": {
      "success": true,
      "message": "Resource usage",
      "process": {
        "rss": 296599552,
        "heap_used": 113355080,
        "heap_total": 137199616,
        "cpu_percentage": 1.31
      },
      "system": {
        "memory_total": 25276063744,
        "memory_free": 20654350336,
        "load_average": [
          14.69,
          14.44,
          11.84
        ],
        "cpus": 2
      },
      "disk": {
        "total": 270553174016,
        "used": 26767790080,
        "percentage": 9.89
      }
    }
  },
  "monitoring.alerts": {
    "response": {
      "success": true,
      "message": "Alerts",
      "alerts": [],
      "total": 0,
      "unresolved": 0
    }
  },
  "application.health": {
    "response": {
      "success": true,
      "status": "healthy",
      "version": "0.1.0",
      "uptime_seconds": 21.17,
      "timestamp": "2026-11-23T07:26:46.777Z"
    }
  },
  "application.workspaceInfo": {
    "response": {
      "success": true,
      "workspace_path": "/home/me/mcp-store",
      "config_files": [
        "mcp.json",
        "mcp.records.jsonl"
      ],
      "data_space": "/home/me/mcp-store/mcp.json"
    }
  },
  "system.root": {
    "response": {
      "success": true,
      "name": "mcp-store",
      "version": "0.1.0",
      "description": "A store of MCP tool services for AI agents: register, list, call and watch tools, per store and per agent",
      "endpoints": {
        "store": 25,
        "agent": 14,
        "monitoring": 14,
        "application": 2,
        "system": 1
      }
    }
  },
  "store.resetConfig": {
    "request": {
      "scope": "store"
    },
    "response": {
      "success": true,
      "message": "Removed 1 service(s) (store)",
      "scope": "store",
      "removed": 1
    }
  },
  "store.resetMcpJsonFile": {
    "response": {
      "success": true,
      "message": "Services file emptied; backup at /home/me/mcp-store/mcp.json.bak",
      "backup_path": "/home/me/mcp-store/mcp.json.bak",
      "removed": 1
    }
  },
  "agent.resetConfig": {
    "response": {
      "success": true,
      "message": "Removed 0 service(s) of agent 'agent-1'",
      "scope": "agent-1",
      "removed": 0
    }
  },
  "store.deleteService": {
    "response": {
      "success": true,
      "message": "Service 'demo' deleted",
      "service_name": "demo"
    }
  },
  "agent.deleteService": {
    "response": {
      "success": true,
      "message": "Service 'demo' deleted",
      "service_name": "demo"
    }
  }
}

/** An example of each error answer of the contract, by HTTP status (shared/API.md, Conventions). */
export const ERROR_EXAMPLES: Readonly<Record<string, unknown>> = Object.fromEntries(
  (
    [
      ["400", "VALIDATION_ERROR", "Invalid request: \"args\" must be an object (got a string)", { fields: [{ field: "args", problem: "must be an object (got a string)" }] }],
      ["401", "UNAUTHORIZED", "Missing or wrong API key: send 'Authorization: Bearer <key>'", {}],
      ["403", "FORBIDDEN_HOST", "Host 'evil.example' is not allowed; add it with --allowed-hosts", { host: "evil.example" }],
      ["404", "TOOL_NOT_FOUND", "Tool 'demo__addd' not found in the store; did you mean 'demo__add'?", { tool_name: "demo__addd", scope: "store", suggestions: ["demo__add"] }],
      ["405", "METHOD_NOT_ALLOWED", "Method DELETE is not allowed on /for_store/list_services; use GET", { allowed: ["GET"] }],
      [
        "408",
        "WAIT_TIMEOUT",
        "Service wait completed: timeout",
        { client_id_or_service_name: "demo", target_status: "healthy", timeout: 10, result: false, final_status: "reconnecting", elapsed_ms: 10002.5, context: "store" }
      ],
      ["413", "PAYLOAD_TOO_LARGE", "Request body is over 1048576 bytes", { limit: 1048576 }],
      ["415", "UNSUPPORTED_MEDIA_TYPE", "Content-Type must be application/json, not 'text/plain'", { content_type: "text/plain" }],
      ["429", "TOO_MANY", "Too many event streams: all 100 are open; try again later", { limit: "max_event_streams", max: 100, retry_after_seconds: 5 }],
      [
        "500",
        "INTERNAL_ERROR",
        "Internal error (trace_id 3f2b6c1e-8a4d-4e0f-9b7a-2c5d1e6f7a8b); the server log has the details",
        { trace_id: "3f2b6c1e-8a4d-4e0f-9b7a-2c5d1e6f7a8b" }
      ],
      ["502", "UPSTREAM_ERROR", "Service 'demo' answered with an error: Internal error", { outcome: "protocol_error", service_name: "demo", code: -32603 }],
      [
        "503",
        "SERVICE_UNAVAILABLE",
        "Service 'demo' is reconnecting; try again later",
        { service_name: "demo", status: "reconnecting", next_retry_at: "2026-11-23T07:26:50.000Z", retry_after_seconds: 4, last_error: "connect ECONNREFUSED 127.0.0.1:8000" }
      ],
      ["504", "TOOL_TIMEOUT", "Tool 'demo__add' did not answer within 60 s", { tool_name: "demo__add", timeout: 60 }]
    ] as const
  ).map(([status, code, message, details]) => [status, { success: false, message, error: { code, message, details } }])
)
