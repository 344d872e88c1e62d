# frozen_string_literal: true

require_relative "../recorder/native"

module GVLScope
  # The route of a Rack request, for GVLScope::Rack's per-route numbers, read after the app ran:
  #   Rails      "UsersController#show" (the controller that handled it, or the router's
  #              path parameters; env["action_dispatch.request.path_parameters"] says it is Rails)
  #   Sinatra    env["sinatra.route"]: "GET /users/:id"
  #   otherwise  the method and the path with its ids replaced: "GET /users/:id/posts". Ids are
  #              segments that are numbers ("42", "42-my-title", "42.json" -> ":id.json"), UUIDs,
  #              hex ids of 8+ characters with a digit, with a run of 3+ digits ("INV-2024-001"), or
  #              tokens of 16+ letters, digits, _ and - with both letters and digits. A 404 there
  #              is "GET (not found)": the paths nobody routes (scanners) are not routes.
  #              A method that is not HTTP's or WebDAV's is "OTHER"; a label past MAX_LABEL_BYTES
  #              keeps its first MAX_LABEL_BYTES bytes and ends in "..." (any client chooses both).
  # Labels repeat, so they are kept: the common case allocates nothing. GVLScope::Rack asks this
  # only for a route's first request (and for what C does not key: see Native::RackRequests in
  # ext/gvlscope/breakdown.c, which builds the same labels for the requests after it).
  class RouteLabel
    MAX_CACHED_PATHS = 1000 # labels of paths without ids kept; past it they are built each time
    NOT_FOUND = " (not found)"
    # Labels travel to a Puma master in datagrams and into every scrape: a client's 3 KB path must
    # not make a 3 KB label. Real route templates are far shorter.
    MAX_LABEL_BYTES = 256
    CUT = "..."
    # The methods named as they are; any other (a server passes unknown ones through) is one label,
    # so that a client cannot make a table per method.
    METHODS = %w[GET HEAD POST PUT DELETE PATCH OPTIONS TRACE CONNECT PROPFIND PROPPATCH MKCOL COPY MOVE
                 LOCK UNLOCK REPORT SEARCH PURGE].to_h { |method| [method, method] }.freeze
    OTHER_METHOD = "OTHER"

    def initialize
      @rails = {}  # controller class => action name => label
      @params = {} # "admin/users" => action => label
      @paths = {}  # method => path without digits => label
      @cached_paths = 0
    end

    # For a plain Rack app this costs two missed env lookups before the template: Rails' and
    # Sinatra's keys are looked up only as long as needed (each lookup hashes its key).
    def call(env, status)
      if (params = env["action_dispatch.request.path_parameters"])
        rails(env, params) || template(env, status)
      elsif (route = env["sinatra.route"])
        route
      else
        template(env, status)
      end
    end

    private

    # The controller that handled the request names its class (as Rails' log does); without one
    # (a redirect route, a mounted app) the router's controller parameter does, if any.
    def rails(env, params)
      if (controller = env["action_controller.instance"])
        by_action = @rails[controller.class] ||= {}
        action = controller.action_name.to_s
        by_action[action] || (by_action[-action] = -"#{controller.class.name}##{action}")
      elsif (name = params[:controller])
        by_action = @params[name] ||= {}
        by_action[params[:action].to_s] ||= -"#{camelize(name)}Controller##{params[:action]}"
      end
    end

    def template(env, status)
      method = METHODS[env["REQUEST_METHOD"]] || OTHER_METHOD
      return -"#{method}#{NOT_FOUND}" if status.to_i == 404

      script_name = env["SCRIPT_NAME"]
      path = script_name.nil? || script_name.empty? ? env["PATH_INFO"].to_s : "#{script_name}#{env['PATH_INFO']}"
      path = "/" if path.empty?
      by_path = @paths[method] ||= {}
      by_path[path] || label_of_path(by_path, method, path)
    end

    # Paths with ids are not kept (there is no end to them); the others are, up to MAX_CACHED_PATHS,
    # and long ones are not (their keys would be as long). The template is made in C
    # (Native.route_template, ext/gvlscope/breakdown.c).
    def label_of_path(by_path, method, path)
      template = Native.route_template(method, path)
      return cut(template) if template

      label = -"#{method} #{path}"
      return cut(label) if @cached_paths >= MAX_CACHED_PATHS || label.bytesize > MAX_LABEL_BYTES

      @cached_paths += 1
      by_path[path.frozen? ? path : -path] = label
    end

    def cut(label)
      return label if label.bytesize <= MAX_LABEL_BYTES

      -"#{label.byteslice(0, MAX_LABEL_BYTES - CUT.bytesize).scrub('')}#{CUT}"
    end

    # "admin/user_profiles" => "Admin::UserProfiles", as Rails names the controller class.
    def camelize(path)
      path.split("/").map { |part| part.split("_").map(&:capitalize).join }.join("::")
    end
  end
end
