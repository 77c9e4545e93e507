# Sourced by bench scripts that need an HTTP archive: nginx serving a
# directory with autoindex (exact sizes), as the daemon's sources expect.
#
#   nginx_archive_conf DIR LISTEN ROOT   writes DIR/nginx.conf (pid, logs and temp paths in DIR)
#   then: nginx -p DIR -c DIR/nginx.conf &
nginx_archive_conf() {
  local dir=$1 listen=$2 root=$3
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<EOF2
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi;
  uwsgi_temp_path $dir/uwsgi;
  scgi_temp_path $dir/scgi;
  sendfile on;
  server {
    listen $listen;
    root $root;
    autoindex on;
    autoindex_exact_size on;
  }
}
EOF2
}
